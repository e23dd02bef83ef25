"""apply() never raises: any field of any command may hold junk from the Raft log."""
from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsched.statemachine import StateMachine, codec
from tsched.statemachine import commands as c
from tsched.statemachine.errors import CODES
from tests.property.budget import examples

T0 = 1_700_000_000_000

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.integers(-5, 5),
    st.integers(T0 - 10, T0 + 10 ** 7), st.floats(allow_nan=True), st.text(max_size=5),
    st.sampled_from(["a", "x", "t1", "\ud800", "exponential", "skip", "buffer_one", "", "y" * 300]),
    st.binary(max_size=4),
)
policies = st.builds(c.RetryPolicy, backoff=scalars, base_ms=scalars, max_ms=scalars,
                     multiplier_milli=scalars, jitter_permille=scalars)
templates = st.builds(c.TaskTemplate, task_type=scalars, payload_json=scalars, priority=scalars,
                      timeout_ms=scalars, max_retries=scalars, retry=policies | scalars)
values = st.one_of(scalars, policies, templates, st.lists(scalars, max_size=3).map(tuple),
                   st.lists(scalars, max_size=3))


# A workflow's template and step rows: the right shape with junk in any field, so that
# apply's checks past the shape are reached too.
template_rows = st.lists(st.tuples(
    st.just("x") | scalars, st.integers(0, 10) | scalars, st.just(60_000) | scalars,
    st.integers(0, 3) | scalars,
    st.just(("fixed", 1, 1, 1_000, 0)) | st.lists(scalars, max_size=6).map(tuple)),
    max_size=3).map(tuple)
step_rows = st.lists(st.tuples(
    st.sampled_from(["a", "b", "a"]) | scalars, st.sampled_from(["s1", "s2", "t1"]) | scalars,
    st.integers(-1, 2) | scalars, st.just("null") | scalars,
    st.lists(st.integers(-1, 3), max_size=3).map(tuple) | scalars,
    st.sampled_from(["cancel", "run"]) | scalars), max_size=4).map(tuple)


@st.composite
def junk_commands(draw):
    cls = draw(st.sampled_from(c.COMMAND_TYPES))
    fields = {}
    for f in dataclasses.fields(cls):
        if f.name == "request_id":
            fields[f.name] = draw(st.sampled_from(["r1", "r2", "r3"]) | scalars)
        elif f.name == "now_ms":
            fields[f.name] = draw(st.integers(T0, T0 + 10 ** 7) | scalars)
        elif f.name == "steps":
            fields[f.name] = draw(step_rows | values)
        elif f.name == "templates":
            fields[f.name] = draw(template_rows | values)
        else:
            fields[f.name] = draw(values)
    return cls(**fields)


def _seeded() -> StateMachine:
    sm = StateMachine()
    sm.apply(c.SubmitTask(request_id="s", now_ms=T0, task_id="t1", tenant="a", task_type="x"))
    sm.apply(c.PutSchedule(request_id="p", now_ms=T0, tenant="a", schedule_id="x",
                           cron="* * * * *", template=c.TaskTemplate(task_type="x"),
                           next_fire_ms=T0))
    sm.apply(c.Claim(request_id="c", now_ms=T0, worker_id="w", task_types=("x",)))
    return sm


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(junk_commands(), min_size=1, max_size=8))
def test_junk_never_raises_and_state_stays_encodable(cmds) -> None:
    sm = _seeded()
    for result in sm.apply_batch(cmds):
        assert result.code in CODES
    restored = StateMachine.restore(sm.snapshot())
    assert restored.digest() == sm.digest() and restored.state_digest() == sm.state_digest()


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=64))
def test_decode_of_random_bytes_is_a_list_or_decode_error(blob) -> None:
    try:
        cmds = codec.decode_batch(blob)
    except codec.DecodeError:
        return
    sm = StateMachine()
    assert all(r.code in CODES for r in sm.apply_batch(cmds))


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(junk_commands(), min_size=1, max_size=8))
def test_any_command_survives_the_log_encoding(cmds) -> None:
    """Whatever a command holds, its log encoding decodes, and re-encodes to the same bytes:
    every replica rebuilds the same commands from an entry. Well-formed commands come back
    equal (the unit tests' examples); junk may come back with lists for tuples."""
    try:
        blob = codec.encode_batch(cmds)
    except (TypeError, ValueError, OverflowError):
        return   # not encodable: the proposer refuses it before it reaches the log
    again = codec.decode_batch(blob)
    assert [type(x) for x in again] == [type(x) for x in cmds]
    assert codec.encode_batch(again) == blob
