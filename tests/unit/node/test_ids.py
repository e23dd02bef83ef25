"""Random ids come from the kernel in bulk: each is 128 fresh bits, none repeats, and a
forked child (the node forks for snapshots) never hands out an id its parent holds."""
import os
import re
import threading

import pytest

from tsched.node import ids
from tsched.node.ids import IDS_PER_READ, IdPool, new_id

HEX32 = re.compile(r"[0-9a-f]{32}")


def test_ids_are_32_hex_digits_and_never_repeat_across_refills():
    pool = IdPool()
    taken = [pool.take() for _ in range(IDS_PER_READ * 3 + 7)]
    assert all(HEX32.fullmatch(i) for i in taken)
    assert len(set(taken)) == len(taken)


def test_threads_taking_at_once_get_distinct_ids():
    pool = IdPool()
    taken: list[list[str]] = [[] for _ in range(4)]

    def take(out: list[str]) -> None:
        for _ in range(IDS_PER_READ * 2):
            out.append(pool.take())

    threads = [threading.Thread(target=take, args=(out,)) for out in taken]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in taken for i in out]
    assert len(set(every)) == len(every) == 4 * IDS_PER_READ * 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_does_not_hand_out_its_parents_pooled_ids():
    ids._POOL.clear()
    new_id()                        # the module's pool now holds IDS_PER_READ - 1 ids
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:                    # the child: its first ids go to the parent, then exit
        try:
            os.write(write_end, "".join(new_id() for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        child = f.read()
    os.waitpid(pid, 0)
    child_ids = {child[i:i + 32] for i in range(0, len(child), 32)}
    assert len(child_ids) == 8
    parent_ids = {new_id() for _ in range(IDS_PER_READ)}   # the rest of its pool, and more
    assert not child_ids & parent_ids
