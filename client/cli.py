"""`tsctl`: the admin CLI (DESIGN.md section 8).

Exit status: 0 success, 1 an API error (its code printed), 2 a usage error, 3 no node answered.
"""
from __future__ import annotations

import sys

# noqa: F401 below: importing them registers their verbs
from . import (cli_admin, cli_archive, cli_audit, cli_limits, cli_queues,  # noqa: F401
               cli_tasks, cli_workflows)
from .cli_common import cli

__all__ = ["cli", "main"]


def main() -> int:
    return cli.main(prog_name="tsctl")


if __name__ == "__main__":
    sys.exit(main())
