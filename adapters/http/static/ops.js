// The operations page: polls GET /v1/ops/overview with a deployment administrator's bearer
// token and draws its numbers as small SVG charts. No build step, no dependencies, nothing
// from elsewhere. Every server value is rendered with textContent or as an SVG attribute; the
// page never builds HTML from data.
"use strict";

(function () {
  const TOKEN_KEY = "dream.ops.token";
  const POLL_MS = 3000;
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 520;
  const ROW = 20;
  const LABEL = 170;
  const VALUE = 110;

  const { ApiFailure, el, clear, show, showError , formatAge } = window.DreamPage;
  const clearError = window.DreamPage.hideError;
  const state = { token: "", timer: null, seq: 0, watching: false };

  // -- small DOM helpers ------------------------------------------------------------------------

  function svgNode(tag, attrs, content) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (content !== undefined) node.textContent = String(content);
    return node;
  }

  function seconds(value) {
    if (value === null || value === undefined) return "-";
    return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(1)} s`;
  }

  // -- charts -----------------------------------------------------------------------------------

  function empty(svg, message) {
    clear(svg);
    svg.setAttribute("viewBox", `0 0 ${WIDTH} 40`);
    svg.setAttribute("data-empty", "true");
    svg.appendChild(svgNode("text", { x: 10, y: 24, class: "empty" }, message));
  }

  // Horizontal bars, one a row: {label, value, max?, cls?, note?}.
  function barChart(svg, rows, emptyMessage) {
    if (rows.length === 0) {
      empty(svg, emptyMessage || "none");
      return;
    }
    clear(svg);
    svg.setAttribute("data-empty", "false");
    const height = rows.length * ROW + 10;
    svg.setAttribute("viewBox", `0 0 ${WIDTH} ${height}`);
    const top = Math.max(1, ...rows.map((row) => Math.max(row.value, row.max || 0)));
    const span = WIDTH - LABEL - VALUE;
    svg.appendChild(svgNode("line", { x1: LABEL, y1: 2, x2: LABEL, y2: height - 4,
                                      class: "axis" }));
    rows.forEach((row, index) => {
      const y = 5 + index * ROW;
      svg.appendChild(svgNode("text", { x: LABEL - 6, y: y + 13, "text-anchor": "end" },
                              row.label));
      if (row.max) {
        svg.appendChild(svgNode("rect", { x: LABEL, y: y + 2, height: ROW - 6,
                                          width: (row.max / top) * span, class: "bar free" }));
      }
      svg.appendChild(svgNode("rect", {
        x: LABEL, y: y + 2, height: ROW - 6, width: Math.max(0, (row.value / top) * span),
        class: `bar ${row.cls || ""}`.trim(), "data-label": row.label, "data-value": row.value,
      }));
      const text = row.note ? `${row.value} (${row.note})` : String(row.value);
      svg.appendChild(svgNode("text", { x: WIDTH - VALUE + 6, y: y + 13 }, text));
    });
  }

  // One line a series over the window's minutes: {name: [count per minute]}.
  function lineChart(svg, series, minutes) {
    clear(svg);
    const height = 170;
    const left = 34;
    const bottom = height - 18;
    svg.setAttribute("viewBox", `0 0 ${WIDTH} ${height}`);
    const top = Math.max(1, ...Object.values(series).flat());
    const total = Object.values(series).flat().reduce((a, b) => a + b, 0);
    svg.setAttribute("data-empty", total === 0 ? "true" : "false");
    const x = (i) => left + (minutes <= 1 ? 0 : (i / (minutes - 1)) * (WIDTH - left - 8));
    const y = (n) => bottom - (n / top) * (bottom - 10);
    svg.appendChild(svgNode("line", { x1: left, y1: bottom, x2: WIDTH - 8, y2: bottom,
                                      class: "axis" }));
    svg.appendChild(svgNode("line", { x1: left, y1: 10, x2: left, y2: bottom, class: "axis" }));
    svg.appendChild(svgNode("text", { x: left - 4, y: 16, "text-anchor": "end" }, top));
    svg.appendChild(svgNode("text", { x: left - 4, y: bottom, "text-anchor": "end" }, 0));
    svg.appendChild(svgNode("text", { x: left, y: height - 4 }, `-${minutes - 1} min`));
    svg.appendChild(svgNode("text", { x: WIDTH - 8, y: height - 4, "text-anchor": "end" },
                            "now"));
    for (const [name, counts] of Object.entries(series)) {
      const points = counts.map((n, i) => `${x(i).toFixed(1)},${y(n).toFixed(1)}`).join(" ");
      svg.appendChild(svgNode("polyline", {
        points, class: `line ${name}`, "data-series": name,
        "data-total": counts.reduce((a, b) => a + b, 0),
      }));
      counts.forEach((n, i) => {
        if (n > 0) {
          svg.appendChild(svgNode("circle", { cx: x(i), cy: y(n), r: 2.5,
                                              class: `line ${name}` }));
        }
      });
    }
  }

  // -- the numbers ------------------------------------------------------------------------------

  function perMinute(body) {
    const since = Date.parse(body.since);
    const series = { accepted: [], succeeded: [], failed: [] };
    for (const name of Object.keys(series)) series[name] = new Array(body.minutes).fill(0);
    for (const row of body.activity) {
      const index = Math.round((Date.parse(row.minute) - since) / 60000);
      if (series[row.event] && index >= 0 && index < body.minutes) {
        series[row.event][index] += row.runs;
      }
    }
    return series;
  }

  function latency(calls) {
    // Every generator's buckets added up, then per bucket (the metric's are cumulative).
    const cumulative = new Map();
    for (const generator of calls) {
      for (const bucket of generator.buckets) {
        const key = bucket.le === null ? Infinity : bucket.le;
        cumulative.set(key, (cumulative.get(key) || 0) + bucket.calls);
      }
    }
    const bounds = [...cumulative.keys()].sort((a, b) => a - b);
    let before = 0;
    const rows = [];
    for (const le of bounds) {
      const upTo = cumulative.get(le);
      rows.push({ label: le === Infinity ? "> last" : `<= ${seconds(le)}`,
                  value: upTo - before });
      before = upTo;
    }
    if (before === 0) return [];
    let last = rows.length - 1;  // the slow buckets no call reached are left out
    while (last > 0 && rows[last].value === 0) last -= 1;
    return rows.slice(0, last + 1);
  }

  function render(body) {
    el("position").textContent = String(body.position);
    el("updated").textContent = new Date(body.generated_at).toLocaleTimeString();
    el("window").textContent = `(last ${body.minutes} min)`;
    barChart(el("chart-runs"), body.runs.map((row) => ({
      label: `${row.status} (${row.trigger})`, value: row.runs, cls: row.status })),
             "no runs yet");
    lineChart(el("chart-activity"), perMinute(body), body.minutes);
    barChart(el("chart-queues"), body.queues.map((row) => ({
      label: row.scope_id, value: row.queued,
      note: `oldest ${formatAge(row.oldest_wait_seconds)}` })), "no run is queued");
    barChart(el("chart-inboxes"), body.inboxes.map((row) => ({
      label: row.scope_id, value: row.pending })), "no Candidate is pending");
    barChart(el("chart-lag"), Object.entries(body.projections).map(([name, view]) => ({
      label: name, value: view.lag === null ? 0 : view.lag,
      cls: view.following ? "" : "failed",
      note: view.dead_letters ? `${view.dead_letters} dead letters`
        : (view.following ? "" : "retrying") })), "no read model");
    const outcomes = [];
    for (const generator of body.model_calls) {
      for (const [outcome, count] of Object.entries(generator.outcomes)) {
        outcomes.push({ label: `${generator.generator} ${outcome}`, value: count, cls: outcome });
      }
    }
    barChart(el("chart-model-calls"), outcomes, "no model call on this host yet");
    barChart(el("chart-latency"), latency(body.model_calls), "no model call on this host yet");
    el("latency-summary").textContent = body.model_calls.map((g) =>
      `${g.generator}: ${g.count} calls, p50 <= ${seconds(g.p50_seconds)}, ` +
      `p95 <= ${seconds(g.p95_seconds)}, mean ${seconds(g.count ? g.sum_seconds / g.count : null)}`
    ).join("; ");
    const slots = body.slots.map((row) => ({
      label: `${row.pool} slots`, value: row.in_use, max: row.cap, cls: "held",
      note: `of ${row.cap}` }));
    if (body.workers) {
      slots.push({ label: "this process", value: body.workers.busy, max: body.workers.capacity,
                   cls: "held", note: `of ${body.workers.capacity}` });
    }
    barChart(el("chart-slots"), slots, "this server runs no workers");
    barChart(el("chart-due"), body.due.map((row) => ({
      label: row.scope_id, value: row.pending, note: "records" })), "no scope is due");
    show(el("dashboard"), true);
    document.body.setAttribute("data-updated", String(Date.now()));
  }

  // -- the API ----------------------------------------------------------------------------------

  async function fetchOverview() {
    try {
      return { ok: true, body: await window.DreamPage.api(state.token, "GET", "/v1/ops/overview") };
    } catch (error) {
      if (!(error instanceof ApiFailure)) throw error;
      return { ok: false, code: error.code, message: error.message, status: error.status };
    }
  }

  async function poll() {
    const seq = ++state.seq;
    const answer = await fetchOverview();
    if (seq !== state.seq || !state.watching) return;  // stopped or restarted meanwhile
    if (answer.ok) {
      clearError();
      render(answer.body);
    } else {
      showError(answer.code, answer.message);
      if (answer.status === 401 || answer.status === 403) {
        stop();  // a refusal does not heal by waiting
        show(el("dashboard"), false);
        return;
      }
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  function stop() {
    state.watching = false;
    state.seq += 1;
    if (state.timer !== null) clearTimeout(state.timer);
    state.timer = null;
  }

  function watch() {
    stop();
    clearError();
    state.watching = true;
    poll();
  }

  // -- wiring -----------------------------------------------------------------------------------

  function connect(event) {
    event.preventDefault();
    state.token = el("token-input").value.trim();
    if (!state.token) {
      showError("invalid_request", "a token is needed");
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, state.token);
    show(el("dashboard"), false);
    watch();
  }

  function forget() {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = "";
    el("token-input").value = "";
    clearError();
    show(el("dashboard"), false);
  }

  document.addEventListener("DOMContentLoaded", () => {
    el("interval").textContent = String(POLL_MS / 1000);
    el("connect-form").addEventListener("submit", connect);
    el("forget-token").addEventListener("click", forget);
    state.token = sessionStorage.getItem(TOKEN_KEY) || "";
    el("token-input").value = state.token;
    if (state.token) watch();
    document.body.setAttribute("data-ready", "true");
  });
})();
