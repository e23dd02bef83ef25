"""Hands an `LmdbJournal` (journal.py) to pysyncobj: SyncObj.__init__ creates its journal
by calling `createJournal(conf.journalFile)` by its module-global name and offers no hook for
a journal class of one's own, so this module replaces that function, once, on import."""
from __future__ import annotations

from pysyncobj.journal import MemoryJournal
from pysyncobj import syncobj as _pysyncobj_syncobj

from tsched.node.raft.journal import LmdbJournal

_prepared: dict[str, LmdbJournal] = {}


def prepare(path: str, journal: LmdbJournal) -> None:
    """Hand `journal` to the next SyncObj constructed with journalFile=`path`."""
    _prepared[path] = journal


def _create_journal(journalFile: str | None = None) -> MemoryJournal | LmdbJournal:
    if journalFile is None:
        return MemoryJournal()
    journal = _prepared.pop(journalFile, None)
    return journal if journal is not None else LmdbJournal(journalFile)


# The one place that swaps it: every SyncObj in this process then logs to LMDB.
_pysyncobj_syncobj.createJournal = _create_journal
