"""The status page at ``/``: one HTML document for a person, live from ``/v1/status`` and
``/v1/jobs``.

Everything it needs is inline (style and script); its Content-Security-Policy allows only
those two, by hash, and requests to this service. The script polls every `POLL_MS` while
the tab is visible, none while it is hidden; after an error it waits twice as long each time,
up to `BACKOFF_MAX_MS`, and never less than the answer's Retry-After. It draws with
``textContent``, never with markup from the answers.
"""

from __future__ import annotations

import base64
import hashlib

POLL_MS = 2000
GPU_SAMPLES = 60  # polls each GPU's strip of busy shares shows, newest on the right
BACKOFF_MAX_MS = 60_000  # the longest wait between polls after errors, doubled from POLL_MS

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
caption { text-align: left; color: #555; padding-bottom: .2em; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
.muted { color: #555; } .bad { color: #b00020; font-weight: 600; } .ok { color: #11701b; }
table { border-collapse: collapse; } td, th { padding: .15em .8em .15em 0; text-align: left; }
th { font-weight: 600; color: #333; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.long { max-width: 40em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.mono { font-family: ui-monospace, monospace; } td.when { white-space: nowrap; }
.bar { width: 24em; height: .9em; background: #ddd; display: inline-block; vertical-align: middle; }
.bar > div { width: 0; height: 100%; background: #3b6fb6; }
.strip { display: inline-flex; gap: 1px; vertical-align: middle; }
.strip > span { width: 5px; height: 1.1em; background: #3b6fb6; }
"""

SCRIPT = (
    """
"use strict";
const POLL_MS = @POLL_MS@, SAMPLES = @SAMPLES@, BACKOFF_MAX_MS = @BACKOFF_MAX_MS@;
const $ = (id) => document.getElementById(id);
const seen = {};  // gpu or "engine:" session -> {t, busy, shares: [busy share of each poll]}
let failures = 0, timer = null, asking = false;  // asking: a poll awaits its answers

function text(id, value) { $(id).textContent = value; }
function gib(bytes) { return (bytes / 2 ** 30).toFixed(2) + " GiB"; }
function seconds(s) { return s == null ? "-" : s < 10 ? s.toFixed(2) + " s" : s.toFixed(0) + " s"; }
function cell(row, value, cls) {
  const td = row.insertCell(); td.textContent = value; if (cls) td.className = cls; return td;
}

async function get(path) {
  const answer = await fetch(path, {cache: "no-store"});
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const err = new Error(body.error || answer.status + " " + answer.statusText);
    err.retryAfterS = Number(answer.headers.get("Retry-After")) || 0;
    throw err;
  }
  return body;
}

// One more busy share for `key`'s strip: busy seconds gained since the last poll, over the
// seconds passed times `workers`; a strip of the last SAMPLES, pale where idle.
function strip(key, busySeconds, workers, now) {
  const past = seen[key] || {t: now, busy: busySeconds, shares: []};
  if (now > past.t) {
    const share = (busySeconds - past.busy) / ((now - past.t) * Math.max(1, workers));
    past.shares.push(Math.min(1, Math.max(0, share)));
    past.shares = past.shares.slice(-SAMPLES);
  }
  seen[key] = {t: now, busy: busySeconds, shares: past.shares};
  const out = document.createElement("span"); out.className = "strip";
  for (const share of past.shares) {
    const s = document.createElement("span"); s.style.opacity = 0.1 + 0.9 * share;
    s.title = (100 * share).toFixed(0) + " % busy"; out.append(s);
  }
  return out;
}

function controller(c) {
  const t = c.terms;
  text("controller-policy", c.policy + (t ? "" : " (baseline)"));
  text("controller-mode", t ? t.mode : c.mode);
  text("controller-interval", seconds(t ? t.interval_s : c.interval_s));
  text("controller-depth", t ? t.projected_ready.toFixed(1) + " projected ready / setpoint "
       + t.setpoint.toFixed(1) : "-");
}

// Each GPU; on a host proving on the CPU (no GPU model), its proving workers instead.
function gpus(list, cpu, now) {
  text("gpus-title", cpu ? "Workers (CPU prover)" : "GPUs");
  text("gpus-what", cpu ? "worker" : "gpu");
  const body = $("gpus"); body.replaceChildren();
  for (const g of list) {
    const row = body.insertRow(); row.dataset.gpu = g.gpu;
    cell(row, g.gpu);
    cell(row, g.workers, "num");
    cell(row, (100 * g.busy_ratio).toFixed(0) + " %", "num");
    cell(row, g.idle_s == null ? "not used yet" : g.idle_s > 0 ? "idle for " + seconds(g.idle_s)
         : "busy");
    row.insertCell().append(strip(g.gpu, g.busy_seconds, 1, now));
  }
}

function engines(list, now) {
  text("engines-none", list.length ? "" : "no engine sessions");
  const body = $("engines"); body.replaceChildren();
  for (const e of list) {
    const row = body.insertRow(); row.dataset.engine = e.session;
    cell(row, e.engine).title = "session " + e.session + ", workload " + e.workload_key;
    cell(row, e.connected ? "connected" : "waiting to resume", e.connected ? "" : "bad");
    cell(row, e.mode);
    cell(row, seconds(e.interval_s), "num");
    cell(row, e.ready + " ready, " + e.projected_ready.toFixed(1) + " projected / "
         + e.setpoint.toFixed(1), "num");
    cell(row, e.inflight + " (" + gib(e.inflight_bytes) + " of " + gib(e.memory_budget_bytes)
         + ")", "num");
    cell(row, e.gpu_busy + " of " + e.gpu_workers + " busy", "num");
    row.insertCell().append(strip("engine:" + e.session, e.gpu_busy_s, e.gpu_workers, now));
    const refused = Object.values(e.errors).reduce((a, b) => a + b, 0);
    cell(row, e.events + " (" + refused + " refused)", "num");
  }
}

function jobs(counts, page) {
  text("job-counts", counts == null ? "not known: a journal call hangs" :
       Object.entries(counts).map(([k, v]) => k + " " + v).join(", ") || "none");
  const body = $("jobs"); body.replaceChildren();
  for (const j of page.jobs) {
    const row = body.insertRow(); row.dataset.job = j.id;
    cell(row, j.id).className = "mono";
    cell(row, j.state, j.state === "failed" ? "bad" : "");
    cell(row, j.partitions_done + "/" + j.partitions, "num");
    cell(row, j.priority, "num");
    cell(row, j.created_at_iso, "when");
    const outcome = j.result_digest || j.error || "";
    cell(row, outcome, "long mono").title = outcome;
  }
  text("jobs-more", page.next_cursor ? "newest " + page.jobs.length + " shown" : "");
}

function show(s, page) {
  const state = $("state");
  state.textContent = s.ready ? "ready" : (s.reasons.join("; ") || "not ready");
  state.className = s.ready ? "ok" : "bad";
  text("workload", s.workload);
  controller(s.controller);
  const q = s.queues;
  text("queues", "backlog " + q.backlog + ", synthesizing " + q.synthesizing + ", ready "
       + q.ready + ", proving " + q.proving);
  const m = s.memory, share = m.budget_bytes ? m.inflight_bytes / m.budget_bytes : 0;
  text("memory", gib(m.inflight_bytes) + " of " + gib(m.budget_bytes) + " in flight ("
       + (100 * share).toFixed(1) + " %)");
  $("memory-bar").style.width = Math.min(100, 100 * share) + "%";
  const now = performance.now() / 1000;
  gpus(s.gpus, (s.plan || {}).gpu_model === "none", now);
  engines(s.engines || [], now);
  jobs(s.jobs, page);
  text("updated", "updated " + new Date().toLocaleTimeString());
}

// The wait before the next poll: POLL_MS while answers come; after errors, doubled with each
// one up to BACKOFF_MAX_MS, and never shorter than the service's Retry-After.
function delay(retryAfterS) {
  if (failures === 0) return POLL_MS;
  return Math.max(1000 * retryAfterS, Math.min(BACKOFF_MAX_MS, POLL_MS * 2 ** (failures - 1)));
}

async function poll() {
  timer = null; asking = true;
  let retryAfterS = 0;
  try {
    const [s, page] = await Promise.all([get("v1/status"), get("v1/jobs?limit=20")]);
    failures = 0;
    show(s, page);
    text("retry", "");
  } catch (err) {
    failures += 1;
    retryAfterS = err.retryAfterS || 0;
    const state = $("state");
    // A failed fetch is a TypeError: no answer at all; otherwise the service said why.
    state.textContent = (err instanceof TypeError ? "no answer: " : "") + err.message;
    state.className = "bad";
  }
  asking = false;
  const wait = delay(retryAfterS);
  if (failures) text("retry", "next try in " + (wait / 1000).toFixed(0) + " s");
  // A hidden tab is not polled: visibilitychange polls again when it is shown.
  if (document.visibilityState !== "hidden") timer = setTimeout(poll, wait);
}

document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "hidden") {
    clearTimeout(timer); timer = null;
  } else if (timer === null && !asking) {
    timer = setTimeout(poll, failures ? delay(0) : 0);
  }
});
poll();
""".replace("@POLL_MS@", str(POLL_MS))
    .replace("@SAMPLES@", str(GPU_SAMPLES))
    .replace("@BACKOFF_MAX_MS@", str(BACKOFF_MAX_MS))
)

BODY = """
<header><h1>pacer <span id="state" class="muted" role="status">loading…</span></h1>
<div class="muted"><span id="workload"></span> · <span id="updated"></span>
<span id="retry"></span> · <a href="v1/status">status JSON</a> · <a href="openapi.json">API</a> ·
<a href="metrics">metrics</a></div></header>
<noscript><p class="bad">This page reads <a href="v1/status">/v1/status</a> with a script;
without scripts, read that JSON.</p></noscript>
<main>
<h2>Controller</h2>
<table><caption>The controller of this service's own pipeline</caption><tbody>
<tr><th scope="row">policy</th><td id="controller-policy"></td></tr>
<tr><th scope="row">mode</th><td id="controller-mode"></td></tr>
<tr><th scope="row">interval</th><td id="controller-interval"></td></tr>
<tr><th scope="row">depth</th><td id="controller-depth"></td></tr>
<tr><th scope="row">queues</th><td id="queues"></td></tr>
</tbody></table>
<h2>Memory</h2>
<table><caption>Host memory held by partitions in flight</caption><tbody>
<tr><th scope="row">in flight</th><td><span class="bar"><div id="memory-bar"></div></span>
<span id="memory"></span></td></tr></tbody></table>
<h2 id="gpus-title">GPUs</h2>
<table><caption>Busy share of the last minute; the strip shows each poll, darker when busier,
so an idle gap is a pale run.</caption>
<thead><tr><th scope="col" id="gpus-what">gpu</th><th scope="col">workers</th>
<th scope="col">busy</th><th scope="col">now</th><th scope="col">recent</th></tr>
</thead><tbody id="gpus"></tbody></table>
<h2>Engine sessions</h2>
<table><caption>Engines paced through the engine protocol. <span id="engines-none"></span>
</caption><thead><tr><th scope="col">engine</th><th scope="col">connection</th>
<th scope="col">mode</th><th scope="col">interval</th><th scope="col">ready / setpoint</th>
<th scope="col">in flight (memory)</th><th scope="col">GPU now</th>
<th scope="col">GPU recent</th><th scope="col">events</th></tr></thead>
<tbody id="engines"></tbody></table>
<h2>Jobs</h2>
<table><caption id="job-counts"></caption>
<thead><tr><th scope="col">job</th><th scope="col">state</th><th scope="col">done</th>
<th scope="col">priority</th><th scope="col">created (UTC)</th>
<th scope="col">result digest / error</th></tr></thead><tbody id="jobs"></tbody></table>
<div id="jobs-more" class="muted"></div>
</main>
"""


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


HTML = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
    '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
    f"<title>pacer</title>\n<style>{STYLE}</style>\n</head><body>{BODY}"
    f"<script>{SCRIPT}</script>\n</body></html>\n"
)
# The page's own style and script, requests to this service, nothing else. The script sets
# widths and shades through the CSSOM, which style-src does not govern.
HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {_hash(SCRIPT)}; style-src {_hash(STYLE)}; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
