"""Server times (RFC 3339 strings) to epoch milliseconds, the checker's one time unit."""
from __future__ import annotations

from datetime import datetime


def to_ms(value) -> int | None:
    """RFC 3339 text or epoch seconds -> epoch ms; None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return int(round(value * 1000))
    return int(round(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000))


def to_rfc3339(ms: int) -> str:
    """Epoch ms -> RFC 3339 UTC with milliseconds (synthetic histories in tests)."""
    from datetime import timezone
    dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
