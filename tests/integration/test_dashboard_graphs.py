"""The dashboard's graphs of the last hour (DESIGN 14.5) in real headless Chromium: a short
load on a real 3-node cluster shows up in the charts a follower's dashboard draws, per
second and per minute, with the counts the cluster applied and a lateness line per tier.

Set TSCHED_SCREENSHOT_DIR to keep the screenshot."""
from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness.cluster import Cluster
from .test_dashboard import browser_page, leader_cluster, needs_chromium, screenshot_dir, until

pytestmark = pytest.mark.slow
LOAD_S = 4.0          # how long the load runs: several one-second points
BATCH = 20            # tasks per round: submitted, claimed, mostly completed
DEAD_PER_ROUND = 2    # the rest fail for good

CHART_TOTALS = """(() => {
  const p = window.TschedCharts && TschedCharts.plots;
  if (!p || !p["chart-activity"]) return null;
  const sum = (a) => a.reduce((s, v) => s + (v || 0), 0);
  const some = (a) => a.filter((v) => v != null).length;
  const a = p["chart-activity"].data;
  const depth = document.getElementById("chart-depth").dataset;
  return { step: Number(depth.step), points: a[0].length,
    submitted: sum(a[1]), completed: sum(a[2]), failed: sum(a[3]), dead: sum(a[4]),
    lateness_points: some(p["chart-lateness"].data[2]),
    lateness_lines: p["chart-lateness"].series.slice(1).map((s) => s.label),
    tier_points: Object.fromEntries(p["chart-lateness"].series.slice(3).map(
      (s, i) => [s.label, some(p["chart-lateness"].data[3 + i])])),
    lateness_legend: [...document.querySelectorAll("#chart-lateness .u-legend .u-label")]
      .map((e) => e.textContent),
    depth_points: some(p["chart-depth"].data[1]),
    lateness_spans_gaps: p["chart-lateness"].series.slice(1).some((s) => s.spanGaps),
    legends: Object.fromEntries(["chart-activity", "chart-lateness", "chart-depth"].map((id) => [id,
      [...document.querySelectorAll(`#${id} .u-legend .u-value`)].map((e) => e.textContent)])),
    latest: Object.fromEntries(["chart-activity", "chart-lateness", "chart-depth"].map((id) => [id,
      p[id].data.slice(1).map((col) => { const v = col.filter((x) => x != null);
        return v.length ? v[v.length - 1] : null; })])),
    count_ticks: ["chart-activity", "chart-depth"].flatMap((id) => p[id].axes[1]._splits || []),
    canvases: document.querySelectorAll("#graphs-card canvas").length,
    attr_points: Number(depth.points) };
})()"""


def run_load(c: Cluster, node: str) -> dict:
    """Rounds of submit, claim, complete (and a few dead letters) for LOAD_S seconds."""
    done = {"submitted": 0, "completed": 0, "dead": 0}
    started = time.monotonic()
    while time.monotonic() - started < LOAD_S:
        s, b = c.call(node, "POST", "/v1/tasks", {"tasks": [
            {"task_type": "statement", "tenant": "bank", "max_retries": 0}] * BATCH})
        assert s == 201, b
        done["submitted"] += BATCH
        s, b = c.call(node, "POST", "/v1/claims", {"worker_id": "w", "task_types": ["statement"],
                                                   "max_tasks": BATCH, "wait_s": 5})
        assert s == 200 and len(b["tasks"]) == BATCH, b
        reports = [{"task_id": t["task_id"], "fencing_token": t["fencing_token"]}
                   for t in b["tasks"][DEAD_PER_ROUND:]]
        reports += [{"task_id": t["task_id"], "fencing_token": t["fencing_token"],
                     "error": "partner bank unreachable", "retryable": False}
                    for t in b["tasks"][:DEAD_PER_ROUND]]
        s, b = c.call(node, "POST", "/v1/completions", {"completions": reports})
        assert s == 200, b
        done["completed"] += BATCH - DEAD_PER_ROUND
        done["dead"] += DEAD_PER_ROUND
    return done


@needs_chromium
async def test_graphs_draw_the_last_hour_of_a_short_load(tmp_path):
    shots = screenshot_dir(tmp_path)
    with leader_cluster(tmp_path) as (c, leader):
        follower = c.followers(leader)[0]
        async with browser_page(tmp_path) as page:
            await page.navigate(c.url(follower) + "/")
            await until("the first refresh", lambda: page.eval(
                "Number(document.body && document.body.dataset.refreshes || 0)"))
            done = await asyncio.to_thread(run_load, c, leader)

            async def drawn():
                t = await page.eval(CHART_TOTALS)
                return t and t["submitted"] == done["submitted"] and \
                    t["completed"] == done["completed"] and t["dead"] == done["dead"] and t
            per_second = await until("the load in the per-second charts", drawn, 20)
            assert per_second["step"] == 1 and per_second["canvases"] >= 3
            assert per_second["points"] >= LOAD_S                # one point per second
            assert per_second["attr_points"] == per_second["points"]
            assert per_second["failed"] == done["dead"]
            assert per_second["lateness_points"] >= 1 and per_second["depth_points"] >= 1
            # one p99 line per priority tier, in the legend too; the load's tasks have the
            # default priority 5, so only the normal tier's line has points
            tiers = [f"p99 {t}" for t in ("critical", "high", "normal", "low", "batch")]
            assert per_second["lateness_lines"] == ["p50", "p99", *tiers]
            assert per_second["lateness_legend"] == ["Time", *per_second["lateness_lines"]]
            assert per_second["tier_points"]["p99 normal"] >= 1
            assert per_second["tier_points"]["p99 critical"] == 0
            assert_legible(per_second)
            await page.eval("document.getElementById('graphs-card').scrollIntoView()")
            await page.screenshot(shots / "dashboard-graphs.png")

            await page.eval("(() => { const s = document.getElementById('graph-step');"
                            " s.value = '60'; s.dispatchEvent(new Event('change')); })()")

            async def per_minute_drawn():
                t = await drawn()
                return t and t["step"] == 60 and t
            per_minute = await until("the same load per minute", per_minute_drawn, 20)
            assert 1 <= per_minute["points"] <= 3     # the cluster is younger than 2 minutes
            assert_legible(per_minute)
            await page.screenshot(shots / "dashboard-graphs-per-minute.png")
            assert page.errors == [], page.errors


def assert_legible(t: dict) -> None:
    """Without hovering, each legend shows its line's latest value ("--" only for a line
    with no point yet); the lateness lines break where there is no data; a count's axis
    ticks are whole numbers."""
    for chart, latest in t["latest"].items():
        shown = t["legends"][chart][1:]          # [0] is the time
        assert [s == "--" for s in shown] == [v is None for v in latest], (chart, shown, latest)
    depth = t["latest"]["chart-depth"][0]
    assert t["legends"]["chart-depth"][1].replace(",", "") == str(depth), t["legends"]
    assert not t["lateness_spans_gaps"]
    assert t["count_ticks"] and all(float(v).is_integer() for v in t["count_ticks"]), \
        t["count_ticks"]
