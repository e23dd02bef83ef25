"""An example producer: submits through the decorated functions of `tasks` and waits for the
results. Run it from this folder, next to `tsworker tasks`:

    cd examples && ../.venv/bin/python producer.py [COUNT]
"""
from __future__ import annotations

import sys

from tasks import add, app, send_email
from tsched.client import TaskFailed


def main(count: int) -> int:
    with app:
        handles = send_email.submit_many(
            [([f"user{i}@example.com"], {"subject": "welcome"}) for i in range(count)])
        print(f"submitted {len(handles)} emails")
        for h in handles:
            print(f"{h.task_id}  {h.result(timeout_s=60)}")
        print(f"2 + 3 = {add.using(priority=0).submit(2, 3).result(timeout_s=60)}")
        try:
            send_email.submit("nobody").result(timeout_s=60)
        except TaskFailed as exc:
            print(f"refused as expected: {exc.last_error}")
            return 0
        return 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
