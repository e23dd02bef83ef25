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
    full_claims(w, rtt_s)
    run(w, clock, per_s=per_s, seconds=1)
    return w, clock


def full_claims(window: Window, rtt_s: float, count: int = 3) -> None:
    """Claims coming back full: enough (3) for the slow start to reach held_max 1000."""
    for _ in range(count):
        window.claim_answered(rtt_s, got=100, want=100)


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
    full_claims(w, 0.010)
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


def burst(window: Window, clock: Clock, tasks: int, each_s: float) -> None:
    """`tasks` handed to the handlers at once, returning `each_s` apart."""
    for _ in range(tasks):
        window.handler_started()
    for _ in range(tasks):
        clock.now += each_s
        window.handler_done()


def test_a_starved_window_grows_to_what_the_handlers_can_do_at_the_first_sample():
    # Claims of 16 come back full every 50 ms and their tasks take 0.1 ms each: over the
    # wall clock that is 320 /s (the window's own size per round trip), while fed the
    # handlers did 10,000 /s. The window sizes itself on the latter, at once.
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    clock.now += 0.050
    w.claim_answered(0.050, got=16, want=16)
    burst(w, clock, 16, 0.0001)
    assert w.fed_rate_per_s > 9000 and w.size == 4 * 16      # slow start: 4x per full claim
    w.claim_answered(0.050, got=16, want=16)
    w.claim_answered(0.050, got=48, want=48)
    assert w.size == 1000


def test_a_short_claim_starts_the_slow_start_again():
    w, _ = busy(per_s=50_000)
    assert w.size == 1000
    w.claim_answered(0.010, got=7, want=100)         # the backlog ended
    w.claim_answered(0.010, got=100, want=100)       # and came back
    assert w.size == 4 * 16


def test_slow_handlers_fed_all_the_time_keep_the_floor():
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    w.claim_answered(0.005, got=16, want=16)
    for _ in range(10):              # always busy: 8 /s whether fed or by the wall clock
        burst(w, clock, 4, 0.125)
    assert 7 < w.fed_rate_per_s < 9 and w.size == 16


def test_the_rate_while_fed_counts_only_under_a_backlog():
    clock = Clock()
    w = Window(concurrency=4, claim_ahead=12, held_max=1000, clock=clock)
    clock.now += 0.050
    full_claims(w, 0.050)
    burst(w, clock, 16, 0.0001)
    assert w.size == 1000
    w.claim_answered(0.050, got=3, want=16)          # short: the backlog is gone
    # back to the wall clock's rate: 16 tasks in 52 ms, about 310 /s
    assert not w.backlog and w.size == int(4 + 2 * w.rate_per_s * 0.050) < 40
