"""client/_window.py: the Worker's window from observed handler rate and claim round trip."""
from tsched.client._window import CLAIMS_OPEN_MAX, Window


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def busy(per_s: float, rtt_s: float = 0.010) -> tuple[Window, Clock]:
    """A window (concurrency 4, claim_ahead 12) after a second of handlers returning at
    `per_s`, its claims coming back full after `rtt_s`."""
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    w.claim_answered(rtt_s, got=100, want=100)
    run(w, clock, per_s=per_s, seconds=1)
    return w, clock


def run(window: Window, clock: Clock, per_s: float, seconds: float) -> None:
    """Handlers returning at `per_s` for `seconds` of the fake clock."""
    for _ in range(int(per_s * seconds)):
        clock.now += 1 / per_s
        window.handler_done()


def test_slow_handlers_keep_concurrency_plus_claim_ahead():
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    w.claim_answered(0.005, got=2, want=2)
    run(w, clock, per_s=8, seconds=5)           # 4 threads, 0.5 s per task
    assert w.size == 16 and w.claims_open_max == 2
    assert w.claim_size(free=1, open_claims=0) == 1     # nothing open: ask for what is free


def test_fast_handlers_hold_two_round_trips_of_work_bounded_by_held_max():
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    w.claim_answered(0.010, got=100, want=100)
    run(w, clock, per_s=5000, seconds=2)
    assert 100 <= w.size <= 4 + 2 * 5000 * 0.010     # about 104
    assert w.claims_open_max == 3
    run(w, clock, per_s=50_000, seconds=1)
    assert w.size == 1000 and w.claims_open_max == CLAIMS_OPEN_MAX


def test_a_claim_that_waited_for_work_does_not_count_as_a_round_trip():
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    w.claim_answered(20.0, got=3, want=100)          # a long poll that found a little
    run(w, clock, per_s=5000, seconds=1)
    assert w.rtt_s == 0 and w.size == 16


def test_an_idle_spell_shrinks_the_window_back():
    w, clock = busy(per_s=5000)
    assert w.size > 16
    for _ in range(3):            # one task every 10 s
        clock.now += 10
        w.handler_done()
    assert w.size == 16


def test_with_a_claim_open_the_next_waits_for_its_share():
    w, _ = busy(per_s=10_000)                      # size 204, 4 claims open at most
    share = (w.size - 4) // w.claims_open_max
    assert w.claim_size(free=share - 1, open_claims=1) == 0
    assert w.claim_size(free=share, open_claims=1) == share
    assert w.claim_size(free=500, open_claims=1) == 100   # the API's bound per claim


def test_without_a_backlog_the_window_claims_as_before():
    w, _ = busy(per_s=10_000)
    assert w.claims_open_max > 2
    w.claim_answered(0.010, got=7, want=100)         # a claim came back short: a trickle
    assert not w.backlog and w.claims_open_max == 2
    assert w.claim_size(free=3, open_claims=1) == 3   # whatever is free, as before
