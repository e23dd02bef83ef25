"""Cron expressions checked where they are written (`@app.periodic`, `tsctl schedules put`
and `preview`), so that a mistake names its field before it travels: at import rather than
when tsworker starts, and before a request rather than in the node's answer.

This check refuses only what the node refuses too (DESIGN.md section 5: 5 fields, or 6
with seconds first; the @ macros; `L`, `W`, `#`, `H`); the node checks again, and alone
decides what fires when (an expression that never fires, such as `0 0 30 2 *`, is its to
refuse).
"""
from __future__ import annotations

import datetime as _dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from tsched.statemachine.limits import LIMITS

MACROS = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
FIELDS = ("minute", "hour", "day of month", "month", "day of week")
ACCEPTED = {"second": "0-59", "minute": "0-59", "hour": "0-23",
            "day of month": "1-31, L, or a weekday such as 15W", "month": "1-12 or JAN-DEC",
            "day of week": "0-7 or SUN-SAT (0 and 7: Sunday), or the nth weekday 5#3"}
_EPOCH = _dt.datetime(1970, 1, 1)


class CronError(ValueError):
    """A cron expression or time zone the cluster would refuse; the message names the
    field."""


def check_cron(expr: str, timezone: str = "UTC") -> None:
    """Raises CronError naming what is wrong: the field of the expression (with the values
    it takes), the number of fields, an unknown macro or time zone."""
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("the cron expression is empty")
    if len(expr) > LIMITS.cron_chars_max:
        raise CronError(f"the cron expression is longer than {LIMITS.cron_chars_max} "
                        "characters")
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise CronError(f"unknown cron macro {text!r} (known: {', '.join(MACROS)})")
    else:
        _check_fields(text)
    check_zone(timezone)


def _check_fields(text: str) -> None:
    parts = text.split(" ")
    if len(parts) not in (5, 6):
        raise CronError(f"cron {text!r} has {len(parts)} fields: give 5 (minute hour "
                        "day-of-month month day-of-week), or 6 with seconds first")
    names = (("second",) if len(parts) == 6 else ()) + FIELDS
    if _accepted(parts):
        return
    for i, (name, part) in enumerate(zip(names, parts)):
        if not _accepted(["*"] * i + [part] + ["*"] * (len(parts) - i - 1)):
            raise CronError(f"cron {text!r}: the {name} field {part!r} is not valid "
                            f"(the {name} takes {ACCEPTED[name]}, lists a,b, ranges a-b and "
                            "steps */n)")
    raise CronError(f"cron {text!r} is not a valid expression")


def _accepted(parts: list[str]) -> bool:
    try:
        croniter(" ".join(parts), _EPOCH, hash_id=b"check", second_at_beginning=len(parts) == 6)
    except Exception:   # noqa: BLE001 - croniter raises several kinds for a bad expression
        return False
    return True


def check_zone(name: str) -> None:
    """Raises CronError for a name that is not an IANA time zone (`Europe/Berlin`, `UTC`)."""
    if not isinstance(name, str) or not name or len(name) > LIMITS.timezone_chars_max:
        raise CronError(f"unknown time zone {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {name!r} (an IANA name such as "
                        "'Europe/Berlin' or 'UTC')") from None
