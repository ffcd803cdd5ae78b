"""The status page at ``/``: one HTML document for a person, live from ``/v1/status`` and
``/v1/jobs``.

Everything it needs is inline (style and script); its Content-Security-Policy allows only
those two, by hash, and requests to this service. The script polls every `POLL_MS` and
draws with ``textContent``, never with markup from the answers.
"""

from __future__ import annotations

import base64
import hashlib

POLL_MS = 2000
GPU_SAMPLES = 60  # polls each GPU's strip of busy shares shows, newest on the right

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
.muted { color: #666; } .bad { color: #b00020; font-weight: 600; } .ok { color: #11701b; }
table { border-collapse: collapse; } td, th { padding: .15em .8em .15em 0; text-align: left; }
th { font-weight: 600; color: #444; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.long { max-width: 40em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.mono { font-family: ui-monospace, monospace; } td.when { white-space: nowrap; }
.bar { width: 24em; height: .9em; background: #ddd; display: inline-block; vertical-align: middle; }
.bar > div { width: 0; height: 100%; background: #3b6fb6; }
.strip { display: inline-flex; gap: 1px; vertical-align: middle; }
.strip > span { width: 5px; height: 1.1em; background: #3b6fb6; }
"""

SCRIPT = """
"use strict";
const POLL_MS = @POLL_MS@, SAMPLES = @SAMPLES@;
const $ = (id) => document.getElementById(id);
const seen = {};  // gpu -> {t, busy, shares: [busy share of each poll interval]}

function text(id, value) { $(id).textContent = value; }
function gib(bytes) { return (bytes / 2 ** 30).toFixed(2) + " GiB"; }
function seconds(s) { return s == null ? "-" : s < 10 ? s.toFixed(2) + " s" : s.toFixed(0) + " s"; }
function cell(row, value, cls) {
  const td = row.insertCell(); td.textContent = value; if (cls) td.className = cls; return td;
}

async function get(path) {
  const answer = await fetch(path, {cache: "no-store"});
  const body = await answer.json();
  if (!answer.ok) throw new Error(body.error || answer.status + " " + answer.statusText);
  return body;
}

function controller(c) {
  const t = c.terms;
  text("controller-policy", c.policy + (t ? "" : " (baseline)"));
  text("controller-mode", t ? t.mode : c.mode);
  text("controller-interval", seconds(t ? t.interval_s : c.interval_s));
  text("controller-depth", t ? t.projected_ready.toFixed(1) + " projected ready / setpoint "
       + t.setpoint.toFixed(1) : "-");
}

function gpus(list, now) {
  const body = $("gpus"); body.replaceChildren();
  for (const g of list) {
    const past = seen[g.gpu] || {t: now, busy: g.busy_seconds, shares: []};
    if (now > past.t) {
      past.shares.push(Math.min(1, Math.max(0, (g.busy_seconds - past.busy) / (now - past.t))));
      past.shares = past.shares.slice(-SAMPLES);
    }
    seen[g.gpu] = {t: now, busy: g.busy_seconds, shares: past.shares};
    const row = body.insertRow(); row.dataset.gpu = g.gpu;
    cell(row, g.gpu);
    cell(row, g.workers, "num");
    cell(row, (100 * g.busy_ratio).toFixed(0) + " %", "num");
    cell(row, g.idle_s == null ? "not used yet" : g.idle_s > 0 ? "idle for " + seconds(g.idle_s)
         : "busy");
    const strip = document.createElement("span"); strip.className = "strip";
    for (const share of past.shares) {
      const s = document.createElement("span"); s.style.opacity = 0.1 + 0.9 * share;
      s.title = (100 * share).toFixed(0) + " % busy"; strip.append(s);
    }
    row.insertCell().append(strip);
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
  gpus(s.gpus, performance.now() / 1000);
  jobs(s.jobs, page);
  text("updated", "updated " + new Date().toLocaleTimeString());
}

async function poll() {
  try {
    const [s, page] = await Promise.all([get("v1/status"), get("v1/jobs?limit=20")]);
    show(s, page);
  } catch (err) {
    const state = $("state");
    // A failed fetch is a TypeError: no answer at all; otherwise the service said why.
    state.textContent = (err instanceof TypeError ? "no answer: " : "") + err.message;
    state.className = "bad";
  }
  setTimeout(poll, POLL_MS);
}
poll();
""".replace("@POLL_MS@", str(POLL_MS)).replace("@SAMPLES@", str(GPU_SAMPLES))

BODY = """
<h1>pacer <span id="state" class="muted">loading…</span></h1>
<div class="muted"><span id="workload"></span> · <span id="updated"></span> ·
<a href="v1/status">status JSON</a> · <a href="openapi.json">API</a> ·
<a href="metrics">metrics</a></div>
<noscript><p class="bad">This page reads <a href="v1/status">/v1/status</a> with a script;
without scripts, read that JSON.</p></noscript>
<h2>Controller</h2>
<table><tbody>
<tr><th>policy</th><td id="controller-policy"></td></tr>
<tr><th>mode</th><td id="controller-mode"></td></tr>
<tr><th>interval</th><td id="controller-interval"></td></tr>
<tr><th>depth</th><td id="controller-depth"></td></tr>
<tr><th>queues</th><td id="queues"></td></tr>
</tbody></table>
<h2>Memory</h2>
<div><span class="bar"><div id="memory-bar"></div></span>
<span id="memory"></span></div>
<h2>GPUs</h2>
<p class="muted">Busy share of the last minute; the strip shows each poll, darker when busier,
so an idle gap is a pale run.</p>
<table><thead><tr><th>gpu</th><th>workers</th><th>busy</th><th>now</th><th>recent</th></tr>
</thead><tbody id="gpus"></tbody></table>
<h2>Jobs</h2>
<div id="job-counts"></div>
<table><thead><tr><th>job</th><th>state</th><th>done</th><th>priority</th><th>created (UTC)</th>
<th>result digest / error</th></tr></thead><tbody id="jobs"></tbody></table>
<div id="jobs-more" class="muted"></div>
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
