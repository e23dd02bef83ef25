"""The Raft thread's watchdog, on a clock of its own."""
from __future__ import annotations

from tsched.node.raft.watchdog import Watchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(clock):
    stopped = []
    dog = Watchdog(stall_ready_s=2.5, stall_exit_s=10.0, tick_failures_max=3,
                   on_fatal=stopped.append, clock=clock)
    return dog, stopped


def test_a_stall_past_the_election_timeout_makes_the_node_unready_then_stops_it():
    clock = Clock()
    dog, stopped = make(clock)
    dog.tick_ok()
    clock.now += 2.0
    assert dog.reason() is None
    clock.now += 1.0
    assert "no progress for 3.0 s" in dog.reason()
    dog.check()
    assert stopped == []
    clock.now += 8.0
    dog.check()
    assert len(stopped) == 1 and "limit 10.0 s" in stopped[0]
    assert dog.reason() == stopped[0]


def test_repeated_tick_failures_stop_the_node_and_a_good_tick_resets_the_count():
    clock = Clock()
    dog, stopped = make(clock)
    dog.tick_failed(ValueError("a"))
    dog.tick_failed(ValueError("b"))
    dog.tick_ok()
    dog.tick_failed(ValueError("c"))
    dog.tick_failed(ValueError("d"))
    assert stopped == []
    dog.tick_failed(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))
    assert len(stopped) == 1 and "failed 3 ticks in a row" in stopped[0]
    assert "UnicodeDecodeError" in stopped[0]


def test_known_long_work_and_applied_batches_are_not_stalls():
    clock = Clock()
    dog, stopped = make(clock)
    with dog.busy("restoring a snapshot"):
        clock.now += 30
        assert dog.reason() is None
        dog.check()
    assert dog.reason() is None and stopped == []
    clock.now += 2.0
    dog.progress()
    clock.now += 2.0
    assert dog.reason() is None


def test_late_ticks_are_logged_at_warning_at_most_once_per_period(caplog):
    clock = Clock()
    dog = Watchdog(stall_ready_s=2.5, stall_exit_s=10.0, tick_failures_max=3,
                   on_fatal=lambda reason: None, clock=clock, late_tick_s=0.5)
    clock.now += 30.0
    dog.tick_ok()                          # the first tick after start-up: not late
    for gap_s in (0.05, 0.7, 0.05, 1.2, 0.9):
        clock.now += gap_s
        dog.tick_ok()
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert dog.late_ticks == 3
    assert len(warnings) == 1 and "1 tick(s) late, the longest 0.70 s" in warnings[0].message
    clock.now += 10.0
    dog.tick_ok()                          # 10 s on: 1.2, 0.9 and this 10 s gap, logged
    assert "3 tick(s) late, the longest 10.00 s" in caplog.text
    with dog.busy("restoring a snapshot"):
        clock.now += 5.0
    dog.tick_ok()                          # known long work: not a late tick
    assert dog.late_ticks == 4
