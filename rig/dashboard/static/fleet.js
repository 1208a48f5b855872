"use strict";
// The fleet page: one card per rig, updated from the stream.

const cards = new Map();   // rig name -> {node, parts}
let operator = false;

function cardFor(rig) {
  let card = cards.get(rig);
  if (card) return card;
  const node = el("article", "rig-card");
  node.dataset.rig = rig;
  const parts = {
    name: el("h2", "rig-name", rig),
    state: el("span", "state"),
    since: el("span", "since"),
    what: el("div", "what"),
    bar: el("div", "bar"),
    fill: el("div", "fill"),
    progress: el("div", "progress-text"),
    run: el("div", "run"),
    spark: document.createElementNS(SVG_NS, "svg"),
    power: el("span", "power"),
    last: el("div", "last"),
    error: el("div", "error"),
    controls: el("div", "controls"),
  };
  parts.spark.setAttribute("class", "spark");
  parts.spark.setAttribute("viewBox", "0 0 120 28");
  parts.spark.setAttribute("preserveAspectRatio", "none");
  parts.bar.appendChild(parts.fill);
  const head = el("div", "head");
  head.append(parts.name, parts.state, parts.since);
  const power = el("div", "power-row");
  power.append(parts.spark, parts.power);
  node.append(head, parts.what, parts.bar, parts.progress, parts.run, power, parts.last,
              parts.error, parts.controls);
  card = {node, parts, controlsFor: null};
  cards.set(rig, card);
  const list = document.getElementById("rigs");
  const after = [...cards.keys()].sort().find((name) => name > rig);
  list.insertBefore(node, after ? cards.get(after).node : null);
  document.getElementById("empty").hidden = true;
  return card;
}

const approx = (text) => (text.startsWith("<") ? text : "~" + text);

function render(c) {
  const {node, parts} = cardFor(c.rig);
  if (node.dataset.state !== c.state) {
    for (const s of ["idle", "running", "error", "offline", "unknown"]) {
      node.classList.toggle("state-" + s, c.state === s);
    }
    node.dataset.state = c.state;
  }
  put(parts.state, c.state + (c.simulated ? " (simulated)" : ""));
  put(parts.since, c.since ? "since " + clock(c.since) : "");
  put(parts.what, [c.procedure, c.phase].filter(Boolean).join(" · "));
  const running = c.state === "running";
  const pct = running && c.total ? Math.min(100, (100 * (c.done || 0)) / c.total) : 0;
  if (parts.fill.style.width !== pct.toFixed(1) + "%") parts.fill.style.width = pct.toFixed(1) + "%";
  if (parts.bar.hidden !== !(running && c.total)) parts.bar.hidden = !(running && c.total);
  put(parts.progress, running && c.done !== null ?
    `${c.done}${c.total ? " / " + c.total : ""}` +
    (c.remaining_s !== null ? ` · ${approx(duration(c.remaining_s))} left` : "") : "");
  const runId = c.run_id || (c.last_run && c.last_run.run_id);
  const runKey = `${c.run_id}|${runId}|${c.last_run && c.last_run.status}`;
  if (parts.run.dataset.key !== runKey) {
    parts.run.dataset.key = runKey;
    parts.run.textContent = "";
  }
  if (runId && !parts.run.firstChild) {
    const link = el("a", "run-link", (c.run_id ? "run " : "last run ") + runId.slice(0, 12));
    link.href = "/run/" + encodeURIComponent(c.rig) + "/" + encodeURIComponent(runId);
    parts.run.appendChild(link);
    if (!c.run_id && c.last_run && c.last_run.status) {
      parts.run.appendChild(el("span", "muted", " " + c.last_run.status));
    }
  }
  polyline(parts.spark, c.power, 120, 28);
  put(parts.power, c.power_w !== null ? si(c.power_w, "W") : "");
  if (c.power_at && node.dataset.powerAt !== String(c.power_at)) {
    node.dataset.powerAt = String(c.power_at);
  }
  put(parts.last, c.last_event ?
    `${clock(c.last_event_at)} ${c.last_event}${c.last_text ? ": " + c.last_text : ""}` : "");
  put(parts.error, c.error || "");
  if (operator) controls(c, cards.get(c.rig));
}

// Rebuilt only when what they offer changes, so a name being typed survives status updates.
function controls(c, card) {
  const mode = !c.serving || c.state === "offline" ? "none" :
    c.state === "running" ? "stop" : "start";
  if (card.controlsFor === mode) return;
  card.controlsFor = mode;
  const box = card.parts.controls;
  box.textContent = "";
  if (mode === "none") return;
  if (mode === "stop") {
    const stop = el("button", "stop", "stop");
    stop.addEventListener("click", () => send({rig: c.rig, action: "stop"}, stop));
    box.appendChild(stop);
    return;
  }
  const proc = el("select", "procedure");
  for (const p of ["asc", "sweep"]) proc.appendChild(el("option", "", p)).value = p;
  const name = el("input", "file-name");
  name.placeholder = "bench or sweep name";
  const start = el("button", "start", "start");
  start.addEventListener("click", () => {
    const key = proc.value === "asc" ? "bench" : "sweep";
    send({rig: c.rig, action: "start", procedure: proc.value, [key]: name.value}, start);
  });
  box.append(proc, name, start);
}

async function send(request, button) {
  button.disabled = true;
  const toast = document.getElementById("toast");
  try {
    const resp = await fetch("/api/command", {
      method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify(request),
    });
    const reply = await resp.json();
    toast.textContent = reply.ok ? `${request.action} sent to ${request.rig}` :
      `${request.action} refused: ${reply.reason}`;
    toast.className = "toast " + (reply.ok ? "ok" : "bad");
  } catch (err) {
    toast.textContent = `${request.action} failed: ${err}`;
    toast.className = "toast bad";
  }
  toast.hidden = false;
  button.disabled = false;
}

function onMessage(msg) {
  if (msg.type === "snapshot") {
    operator = !!msg.operator;
    document.getElementById("mode").textContent = operator ? "operator" : "read-only";
    const seen = new Set(msg.rigs.map((c) => c.rig));
    for (const [rig, card] of cards) {
      if (!seen.has(rig)) { card.node.remove(); cards.delete(rig); }
    }
    for (const c of msg.rigs) render(c);
    document.getElementById("empty").hidden = cards.size > 0;
  } else if (msg.type === "rig") {
    render(msg.rig);
  }
}

follow("/api/stream", onMessage);
setInterval(() => {
  document.getElementById("clock").textContent = clock(Date.now() / 1000);
}, 1000);
