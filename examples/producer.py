"""An example producer: submits a few tasks and waits for their results.

    .venv/bin/python examples/producer.py [COUNT]
"""
import os
import sys
import time

from tsched.client import Client

URLS = os.environ.get(
    "TSCTL_URL", "http://127.0.0.1:8701,http://127.0.0.1:8702,http://127.0.0.1:8703")
TERMINAL = ("completed", "cancelled", "dead_letter")


def main(count: int) -> int:
    with Client(URLS) as client:
        ids = [client.submit("send_email", {"to": f"user{i}@example.com"}, priority=3)["task_id"]
               for i in range(count)]
        print(f"submitted {len(ids)} tasks")
        deadline = time.monotonic() + 60
        for task_id in ids:
            task = client.get(task_id)
            while task["state"] not in TERMINAL and time.monotonic() < deadline:
                time.sleep(0.2)   # poll until the worker has finished it
                task = client.get(task_id)
            print(f"{task_id}  {task['state']}  {task.get('result')}")
        return 0 if all(client.get(i)["state"] == "completed" for i in ids) else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
