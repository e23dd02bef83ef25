"""claim_hub.ClaimHub._adapt_fanout: how many waiters of one kind the dispatcher wakes at
once, as their Claims come back full, short or empty."""
from __future__ import annotations

from types import SimpleNamespace

from tsched.node.scheduling.claim_hub import FANOUT_MAX, ClaimHub

KIND = (("t",), None, 0, (0, 10), ())


def waiter(max_tasks: int = 100) -> SimpleNamespace:
    return SimpleNamespace(claim=SimpleNamespace(kind=lambda: KIND, max_tasks=max_tasks))


def answered(hub: ClaimHub, *got: int) -> int:
    """One round of Claims, one per count in `got`; the kind's fan-out after it."""
    hub._adapt_fanout([waiter() for _ in got], [[{}] * n for n in got])
    return hub._fanout[KIND]


def test_claims_sent_one_per_round_and_coming_back_full_widen_the_fanout():
    # A Worker's pipelined claims arrive one by one, each dispatched in a round of its own:
    # the fan-out grows from what it was (it stayed at 2 when it doubled the round's size).
    hub = ClaimHub(node=None)
    assert [answered(hub, 100) for _ in range(4)] == [2, 4, 8, 16]
    for _ in range(10):
        answered(hub, 100)
    assert hub._fanout[KIND] == FANOUT_MAX


def test_a_short_or_empty_claim_brings_it_back_to_what_found_work():
    hub = ClaimHub(node=None)
    for _ in range(5):
        answered(hub, 100)
    assert answered(hub, 100, 100, 40) == 3      # all three found some
    assert answered(hub, 100, 0, 0) == 1         # one did: no herd of empty Claims
    assert answered(hub, 0) == 1
