// tsched dashboard graphs: the last hour from GET /v1/timeseries, drawn with uPlot (vendored
// as uPlot.iife.min.js, MIT, see uPlot.LICENSE.txt). app.js fetches the points and calls
// TschedCharts.draw(answer); this file only turns an answer into three charts. The lateness
// chart adds one p99 line per priority tier of the answer (lateness_p99_ms_by_tier).
"use strict";
window.TschedCharts = (() => {
  const HEIGHT_PX = 170;
  const SPAN_POINTS_MIN = 60;   // the x axis spans at least 60 points: a minute, or the hour
  const COLORS = { submitted: "#2f6fde", completed: "#1f9d55", failed: "#c98a00",
    dead_lettered: "#d0392b", p50: "#2f6fde", p99: "#8e44ad", depth: "#1d2330" };
  // The tiers' p99 lines, most urgent first (the default five: critical .. batch).
  const TIER_COLORS = ["#d0392b", "#e67e22", "#1f9d55", "#16a2b8", "#7f8c8d", "#b7950b"];
  // One chart per unit: counts per point, milliseconds, tasks.
  const CHARTS = [
    { id: "chart-activity", title: (per) => `tasks per ${per}`, counts: true, series: [
      ["submitted", "submitted", COLORS.submitted], ["completed", "completed", COLORS.completed],
      ["failed", "failed attempts", COLORS.failed], ["dead_lettered", "dead-lettered", COLORS.dead_lettered]] },
    { id: "chart-lateness", title: () => "claim lateness (ms)", tiers: true, series: [
      ["lateness_p50_ms", "p50", COLORS.p50], ["lateness_p99_ms", "p99", COLORS.p99]] },
    { id: "chart-depth", title: () => "queue depth (pending)", counts: true, series: [
      ["queue_depth", "pending", COLORS.depth]] },
  ];
  // A count's axis steps by whole numbers only (no 0.5 task).
  const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5,
    2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 1e8, 1e9];
  const plots = {};      // chart id -> uPlot, rebuilt when the step changes
  let step = null;

  // A chart's lines for this answer: [column, label, colour], with the tiers' p99 lines.
  function lines(answer, chart) {
    const out = chart.series.map(([key, label, stroke]) => [answer[key], label, stroke]);
    if (chart.tiers) {
      Object.entries(answer.lateness_p99_ms_by_tier || {}).forEach(([tier, column], i) =>
        out.push([column, `p99 ${tier}`, TIER_COLORS[i % TIER_COLORS.length]]));
    }
    return out;
  }

  function columns(answer, series) {
    const n = answer.submitted.length;
    const xs = Array.from({ length: n }, (_, i) => answer.start + i * answer.step_s);
    return [xs, ...series.map(([column]) => column)];
  }

  // Dots where values are few (a lone claim between empty seconds draws no line), none
  // where they are many.
  function sparse(u, seriesIdx) {
    const values = u.data[seriesIdx].filter((v) => v != null).length;
    return values * 8 < u.width;
  }

  // Where each line's latest value is (null: none yet); the x column, the latest of them.
  function latest(u) {
    const idxs = u.data.slice(1).map((column) => {
      for (let i = column.length - 1; i >= 0; i--) if (column[i] != null) return i;
      return null;
    });
    const known = idxs.filter((i) => i != null);
    return [known.length ? Math.max(...known) : null, ...idxs];
  }

  // Legends show each line's latest value while the cursor is off the chart (uPlot's own
  // legend shows "--" there), and the values under the cursor while it is on.
  function showLatest(u) {
    if (u.cursor.idx == null) u.setLegend({ idxs: latest(u) });
  }

  function options(chart, series, width) {
    const per = step === 1 ? "second" : "minute";
    return {
      title: chart.title(per), width, height: HEIGHT_PX,
      cursor: { drag: { x: false, y: false } },
      scales: {
        x: { range: (u, lo, hi) => [Math.min(lo, hi - SPAN_POINTS_MIN * step), hi] },
        y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] },
      },
      series: [{}, ...series.map(([, label, stroke]) => ({
        // No line across points without data (seconds without a claim): it breaks there.
        label, stroke, width: 1.5, spanGaps: false,
        points: { show: sparse, size: 5, fill: stroke },
      }))],
      axes: [{}, chart.counts ? { size: 56, incrs: COUNT_INCRS } : { size: 56 }],
      hooks: { setCursor: [showLatest], setData: [showLatest], ready: [showLatest] },
    };
  }

  function draw(answer) {
    if (answer.step_s !== step) {
      for (const id of Object.keys(plots)) { plots[id].destroy(); delete plots[id]; }
      step = answer.step_s;
    }
    for (const chart of CHARTS) {
      const el = document.getElementById(chart.id);
      const series = lines(answer, chart);
      const data = columns(answer, series);
      const width = Math.max(200, el.clientWidth);
      const labels = series.map(([, label]) => label).join("|");
      if (plots[chart.id] && plots[chart.id].tschedLabels !== labels) {
        plots[chart.id].destroy(); delete plots[chart.id];   // other lines: a new chart
      }
      if (!plots[chart.id]) {
        plots[chart.id] = new uPlot(options(chart, series, width), data, el);
        plots[chart.id].tschedLabels = labels;
      }
      else {
        plots[chart.id].setData(data);
        if (Math.abs(plots[chart.id].width - width) > 4) plots[chart.id].setSize({ width, height: HEIGHT_PX });
      }
      el.dataset.points = data[0].length;   // read by the browser test, and handy to look at
      el.dataset.step = answer.step_s;
    }
  }

  return { draw, plots };
})();
