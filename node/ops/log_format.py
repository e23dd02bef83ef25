"""The node's log lines: one line per event, key=value text or JSON, each stamped with
the node id and the current Raft term (DESIGN.md section 12)."""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

import orjson


class LogContext(logging.Filter):
    """Stamps every record with the node id and the current Raft term."""

    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id
        self.term_of: Callable[[], int | None] = lambda: None   # serve() sets the replica's

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node_id
        try:
            record.term = self.term_of()
        except Exception:
            record.term = None
        return True


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + f".{int(record.msecs):03d}Z", "level": record.levelname.lower(),
               # node and term: set on every record by the handler's LogContext filter
               "logger": record.name, "node": record.node,  # type: ignore[attr-defined]
               "term": record.term,  # type: ignore[attr-defined]
               "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


_TEXT = "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s node=%(node)s term=%(term)s %(message)s"
def setup_logging(node_id: str, fmt: str = "text", level: int = logging.INFO) -> LogContext:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_Json())
    else:
        f = logging.Formatter(_TEXT, datefmt="%Y-%m-%dT%H:%M:%S")
        f.converter = time.gmtime
        handler.setFormatter(f)
    context = LogContext(node_id)
    handler.addFilter(context)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return context


