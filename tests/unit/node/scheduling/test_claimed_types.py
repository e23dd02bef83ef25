"""The leader's advisory record of the task types workers asked for (claimed_types.py):
its window, a new term starting it afresh, and its bound."""
from __future__ import annotations

from tsched.node.scheduling.claimed_types import ClaimedTypes


def test_a_type_asked_for_within_the_window_is_claimed_and_one_never_asked_for_is_not():
    seen = ClaimedTypes(window_s=60)
    seen.watch(term=3, now_s=1000)
    seen.note(("email", "sms"), term=3, now_s=1010)
    assert seen.unclaimed("email", term=3, now_s=1050) is None   # watched < a window
    assert seen.unclaimed("email", term=3, now_s=1065) is False
    assert seen.unclaimed("fax", term=3, now_s=1065) is True
    assert seen.unclaimed("email", term=3, now_s=1071) is True    # 61 s since asked
    seen.note(("email",), term=3, now_s=1072)
    assert seen.unclaimed("email", term=3, now_s=1100) is False


def test_another_term_starts_the_record_afresh():
    seen = ClaimedTypes(window_s=60)
    seen.note(("email",), term=3, now_s=1000)
    assert seen.unclaimed("fax", term=3, now_s=1061) is True
    assert seen.unclaimed("fax", term=4, now_s=1062) is None      # a new leader's term
    assert seen.unclaimed("email", term=4, now_s=1130) is True    # not asked in term 4
    assert len(seen) == 0


def test_the_record_is_bounded_and_cannot_tell_about_a_type_it_may_have_forgotten():
    seen = ClaimedTypes(window_s=60, types_max=3)
    seen.watch(term=1, now_s=0)
    for i in range(5):
        seen.note((f"t{i}",), term=1, now_s=100 + i)
    assert len(seen) == 3
    assert seen.unclaimed("t4", term=1, now_s=110) is False
    assert seen.unclaimed("never", term=1, now_s=110) is None     # t0, t1 were forgotten
    assert seen.unclaimed("never", term=1, now_s=162) is True     # they left the window
