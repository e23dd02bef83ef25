"""Celery's canvas as workflow graphs (client/canvas.py): which steps wait for which, and
what each gets from its parents; the worker's side of it (`_appcall.with_parents`)."""
from __future__ import annotations

import pytest

from tsched.client import App, chain, chord, group
from tsched.client._appcall import with_parents
from tsched.client._jobs import ParentFailed, TaskContext, parents_from
from tsched.client.canvas import batch_steps, graph_of

app = App("http://127.0.0.1:1")


@app.task(name="add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="tsum")
def tsum(values: list) -> int:
    return sum(values)


@app.task(name="done")
def done(ctx: TaskContext) -> int:
    return len(ctx.parents)


def _shape(node):
    steps, tails, _ = graph_of(node)
    return [(s["name"], s["deps"], s["payload"].get("parents")) for s in steps], tails


def test_a_chain_passes_each_result_to_the_next():
    steps, tails = _shape(chain(add.s(2, 2), add.s(4), add.s(8)))
    assert steps == [("0:add", [], None), ("1:add", ["0:add"], "first"),
                     ("2:add", ["1:add"], "first")]
    assert tails == ["2:add"]


def test_a_chord_callback_waits_for_the_whole_group_and_gets_the_list():
    steps, tails = _shape(chord((add.s(i, i) for i in range(3)), tsum.s()))
    assert steps[-1] == ("3:tsum", ["0:add", "1:add", "2:add"], "list")
    assert tails == ["3:tsum"]
    assert _shape(chain(group(add.s(1, 1), add.s(2, 2)), tsum.s()))[0] == steps[:2] + [
        ("2:tsum", ["0:add", "1:add"], "list")]


def test_a_group_has_no_deps_and_every_member_is_a_tail():
    steps, tails = _shape(group(add.s(1, 1), add.s(2, 2)))
    assert [s[1] for s in steps] == [[], []] and tails == ["0:add", "1:add"]


def test_a_batch_callback_is_immutable_and_reads_ctx_parents():
    steps, _ = _shape(batch_steps([add.s(i, 1) for i in range(3)], done.s()))
    assert steps[-1] == ("3:done", ["0:add", "1:add", "2:add"], None)


def test_a_signature_that_cannot_take_its_parents_result_is_refused_at_once():
    with pytest.raises(TypeError, match="add"):
        graph_of(chain(add.s(1, 2), add.s(1, 2)))   # 1 + 2 args with the parent's result


def test_the_worker_puts_the_parents_results_first():
    ctx = TaskContext("t", "t", 1, 1, "add", None, None,
                      parents_of=lambda tid: {"parents": {
                          "a": {"state": "completed", "result": 4},
                          "b": {"state": "dead_letter", "error": "E: x", "task_id": "tb"}}})
    assert ctx.parents == {"a": 4, "b": ParentFailed("dead_letter", "E: x", "tb")}
    assert with_parents({"args": [1], "parents": "first"}, [1], ctx) == [4, 1]
    assert with_parents({"args": [], "parents": "list"}, [], ctx)[0][0] == 4
    assert with_parents({"args": [1]}, [1], ctx) == [1]
    assert parents_from({"workflow_id": None, "step": None, "parents": {}}) == {}


def test_nested_chords_flatten_into_one_graph():
    inner = chord([add.s(1, 1), add.s(2, 2)], tsum.s())
    steps, tails = _shape(chord(group(inner, add.s(3, 3)), tsum.s()))
    assert steps == [("0:add", [], None), ("1:add", [], None),
                     ("2:tsum", ["0:add", "1:add"], "list"), ("3:add", [], None),
                     ("4:tsum", ["2:tsum", "3:add"], "list")]
    assert _shape(add.s(1, 1) | add.s(2))[0][1] == ("1:add", ["0:add"], "first")
    with pytest.raises(TypeError, match="callback"):
        graph_of(chord([add.s(1, 1)]))
