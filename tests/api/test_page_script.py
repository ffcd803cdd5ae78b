"""The status page's script run by Node.js on a virtual clock, with a stub page and a stub
``fetch``: when it polls after answers, after errors with their Retry-After, and while the tab
is hidden."""

from __future__ import annotations

import itertools
import json
import subprocess

from pacer.api import page

# A stub of what the script uses of a browser; `setTimeout` only records, `advance` runs the
# timers due in virtual milliseconds. `answer(path)` says what each request gets.
HARNESS = """
let now = 0, timers = [], ids = 0;
const polls = [];  // virtual ms of each request for v1/status
globalThis.setTimeout = (fn, ms) => { timers.push({fn, at: now + ms, id: ++ids}); return ids; };
globalThis.clearTimeout = (id) => { timers = timers.filter((t) => t.id !== id); };
Object.defineProperty(globalThis, "performance", {value: {now: () => now}});
function element() {
  return {textContent: "", className: "", title: "", style: {}, dataset: {}, append() {},
          replaceChildren() {}, insertRow: () => ({dataset: {}, insertCell: element})};
}
const elements = {}, listeners = {};
globalThis.document = {
  visibilityState: "visible", createElement: element,
  getElementById: (id) => (elements[id] ||= element()),
  addEventListener: (kind, fn) => { listeners[kind] = fn; },
};
const STATUS = {ready: true, reasons: [], workload: "noop", plan: {gpu_model: "none"},
  controller: {policy: "pi", terms: null, mode: "bootstrap", interval_s: 1},
  queues: {backlog: 0, synthesizing: 0, ready: 0, proving: 0},
  memory: {budget_bytes: 1, inflight_bytes: 0}, gpus: [], engines: [], jobs: {}};
let answer = () => ({status: 200, body: STATUS});  // set again by `run`
globalThis.fetch = async (path) => {
  if (path === "v1/status") polls.push(now);
  const a = path === "v1/status" ? answer(path) : {status: 200, body: {jobs: []}};
  return {ok: a.status < 400, status: a.status, statusText: "", json: async () => a.body,
          headers: {get: (name) => (name === "Retry-After" ? a.retryAfter ?? null : null)}};
};
const settle = async () => { for (let i = 0; i < 20; i++) await new Promise(setImmediate); };
async function advance(ms) {
  const end = now + ms;
  for (;;) {
    await settle();
    timers.sort((a, b) => a.at - b.at);
    if (!timers.length || timers[0].at > end) break;
    const t = timers.shift(); now = t.at; t.fn();
  }
  now = end;
}
function hide(hidden) {
  document.visibilityState = hidden ? "hidden" : "visible"; listeners.visibilitychange();
}
const ok = () => ({status: 200, body: STATUS});
"""


def run(node: str, scenario: str, answer: str = "ok") -> dict[str, object]:
    """The script, its requests answered by ``answer`` (a JavaScript function), then
    ``scenario`` (JavaScript ending with ``report({...})``); its report."""
    source = (
        HARNESS
        + f"answer = {answer};\n"
        + page.SCRIPT
        + "\nconst report = (r) => console.log(JSON.stringify(r));\n(async () => {\n"
        + scenario
        + "\n})();\n"
    )
    done = subprocess.run([node, "-"], input=source, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return report


def test_it_polls_every_two_seconds_while_answers_come(node: str) -> None:
    out = run(node, "await advance(9000); report({polls});")
    assert out["polls"] == [0, 2000, 4000, 6000, 8000]


def test_after_errors_it_waits_twice_as_long_each_time_up_to_a_minute(node: str) -> None:
    refuse = '() => ({status: 503, retryAfter: "1", body: {error: "not serving yet"}})'
    out = run(node, """
        await advance(200000);
        const failing = [...polls];
        answer = ok;
        const since = now; await advance(70000);
        report({failing, after: polls.slice(failing.length).map((t) => t - since),
                retry: elements.retry.textContent, state: elements.state.textContent});
    """, refuse)  # fmt: skip
    failing = out["failing"]
    assert isinstance(failing, list)
    waits = [b - a for a, b in itertools.pairwise(failing)]
    assert waits[:6] == [2000, 4000, 8000, 16000, 32000, 60000]
    assert set(waits[5:]) == {page.BACKOFF_MAX_MS}
    after = out["after"]
    assert isinstance(after, list)
    assert [b - a for a, b in itertools.pairwise(after)][:3] == [2000, 2000, 2000]
    assert out["retry"] == ""  # the pace is back: no "next try in"
    assert out["state"] == "ready"


def test_it_never_asks_again_before_retry_after(node: str) -> None:
    refuse = '() => ({status: 503, retryAfter: "5", body: {error: "reads full"}})'
    out = run(node, """
        await advance(20000);
        report({polls, retry: elements.retry.textContent, state: elements.state.textContent});
    """, refuse)  # fmt: skip
    assert out["polls"] == [0, 5000, 10000, 18000]  # 5 s, 5 s, then the doubled 8 s is longer
    assert out["retry"] == "next try in 16 s"
    assert out["state"] == "reads full"


def test_a_hidden_tab_is_not_polled_and_is_polled_at_once_when_shown(node: str) -> None:
    out = run(node, """
        await advance(1000);
        hide(true); await advance(120000);
        const hidden = polls.length;
        hide(false); await advance(10);
        report({hidden, polls});
    """)  # fmt: skip
    assert out["hidden"] == 1  # the first poll only: none in the two hidden minutes
    assert out["polls"] == [0, 121000]
