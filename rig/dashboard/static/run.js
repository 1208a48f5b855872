"use strict";
// The run page: live event log, power trace, RunFinished's figures and checks, sweep grid.

const [, , rigName, runId] = window.location.pathname.split("/").map(decodeURIComponent);
document.getElementById("rig-name").textContent = rigName;
document.getElementById("run-id").textContent = runId;
document.title = `${rigName} / ${runId.slice(0, 12)}`;

const power = [];     // [t_s, mean_w, min_w, max_w]
let eventsSeen = 0;
let grid = null;      // axes from RunStarted, or null
const cellNodes = new Map();
let cellsDone = 0;

function addEvent(row) {
  const body = document.querySelector("#log tbody");
  const tr = el("tr", "event ev-" + row.kind.replace(/[^a-z_]/g, ""));
  tr.append(el("td", "at", clock(row.at)), el("td", "kind", row.kind), el("td", "text", row.text));
  body.appendChild(tr);
  while (body.rows.length > 400) body.deleteRow(0);
  eventsSeen = Math.max(eventsSeen, row.n + 1);
  document.getElementById("event-count").textContent = `(${eventsSeen})`;
  const box = body.closest(".log-box");
  box.scrollTop = box.scrollHeight;
}

function drawPower() {
  const svg = document.getElementById("trace");
  polyline(svg, power.map((p) => p[1]), 800, 160);
  svg.style.display = power.length ? "" : "none";
  document.getElementById("trace-range").textContent = "no power summaries from this run";
  if (power.length) {
    const last = power[power.length - 1];
    const means = power.map((p) => p[1]);
    document.getElementById("power-now").textContent = `(${si(last[1], "W")} now)`;
    document.getElementById("trace-range").textContent =
      `${power.length} summaries over ${duration(last[0] - power[0][0])} ` +
      `(simulated time of the monitor); mean ${si(Math.min(...means), "W")} … ` +
      `${si(Math.max(...means), "W")}`;
  }
}

function showResult(result) {
  document.getElementById("result-section").hidden = false;
  const status = document.getElementById("result-status");
  status.textContent = result.status + (result.error ? `: ${result.error}` : "");
  status.className = "status-" + result.status.replace(/[^a-z-]/g, "");
  document.getElementById("run-state").textContent = result.status;
  const body = document.querySelector("#figures tbody");
  body.textContent = "";
  // Beside the exact figure, as the rig reads it everywhere when it has a GUM budget: "45.00 µJ
  // ± ≥1.0 µJ (k=2, incomplete)" (formatted by the server, fleet.uncertainties).
  const budgets = result.uncertainty || {};
  for (const [key, value] of Object.entries(result.figures)) {
    const tr = el("tr", "figure");
    tr.dataset.key = key;
    const b = budgets[key];
    const shown = el("td", "uncertainty", b ? b.text : "");
    if (b) {
      shown.title = `U = ${b.U} (k = ${b.k}, ~95 %)` + (b.complete ? "" :
        `; incomplete: ${b.unknown} unknown term(s), so U is a lower bound`);
      if (!b.complete) shown.classList.add("incomplete");
    }
    tr.append(el("th", "", key), el("td", "", value === null ? "–" : String(value)), shown);
    body.appendChild(tr);
  }
  const list = document.getElementById("checks");
  list.textContent = "";
  for (const c of result.checks) {
    const li = el("li", c.ok ? "check ok" : "check bad");
    li.append(el("span", "mark", c.ok ? "✓" : "✗"), el("strong", "", c.name),
              el("span", "detail", " " + c.detail));
    list.appendChild(li);
  }
}

const cellId = (sut, nodes, density, timeout) => `${sut}|${nodes}|${density}|${timeout}`;

function layoutGrid(g) {
  grid = g;
  const box = document.getElementById("grid");
  box.textContent = "";
  document.getElementById("grid-section").hidden = false;
  const table = el("table", "grid");
  const head = el("tr");
  head.append(el("th", "", "SUT"), el("th", "", "nodes"), el("th", "", "density"));
  for (const t of g.timeouts) head.appendChild(el("th", "", `timeout ${t} s`));
  table.appendChild(head);
  for (const sut of g.suts) {
    for (const n of g.nodes) {
      for (const d of g.densities) {
        const tr = el("tr");
        tr.append(el("th", "", sut), el("td", "", n), el("td", "", d));
        for (const t of g.timeouts) {
          const td = el("td", "cell empty", "");
          td.dataset.cell = cellId(sut, n, d, t);
          cellNodes.set(td.dataset.cell, td);
          tr.appendChild(td);
        }
        table.appendChild(tr);
      }
    }
  }
  box.appendChild(table);
}

function gapColour(gap) {
  const x = Math.max(0, Math.min(1, gap / 0.25));
  return `hsl(${(120 * (1 - x)).toFixed(0)}, 65%, 72%)`;
}

function showCell(cell) {
  document.getElementById("grid-section").hidden = false;
  const id = cellId(cell.sut, cell.nodes, cell.density, cell.timeout_s);
  let td = cellNodes.get(id);
  if (!td) {  // a point outside the announced grid (or no grid): listed below it
    td = el("div", "cell");
    td.dataset.cell = id;
    cellNodes.set(id, td);
    document.getElementById("grid").appendChild(td);
  }
  td.classList.remove("empty");
  td.dataset.points = String(cell.points);
  td.dataset.failed = String(cell.failed);
  td.dataset.gap = cell.gap_mean === null ? "" : String(cell.gap_mean);
  td.classList.toggle("failed", cell.failed > 0);
  td.textContent = "";
  const seeds = grid ? grid.seeds : null;
  td.append(el("span", "gap", cell.gap_mean === null ? "–" : cell.gap_mean.toFixed(3)),
            el("span", "points", ` ${cell.points}${seeds ? "/" + seeds : ""}`));
  if (cell.failed) td.appendChild(el("span", "failed-mark", ` ✗${cell.failed}`));
  td.style.background = cell.gap_mean === null ? "" : gapColour(cell.gap_mean);
  td.title = `${cell.sut} n=${cell.nodes} d=${cell.density} t=${cell.timeout_s}: ` +
             `mean gap ${cell.gap_mean}, ${cell.points} points, ${cell.failed} failed`;
  cellsDone = document.querySelectorAll("#grid .cell:not(.empty)").length;
  document.getElementById("grid-count").textContent = `(${cellsDone} cells)`;
}

function onMessage(msg) {
  if (msg.type === "snapshot") {
    const run = msg.run;
    document.getElementById("unknown").hidden = !!run;
    if (!run) return;
    document.querySelector("#log tbody").textContent = "";
    for (const row of run.events) addEvent(row);
    power.length = 0;
    power.push(...run.power);
    drawPower();
    cellNodes.clear();
    if (run.grid) layoutGrid(run.grid);
    for (const cell of run.cells) showCell(cell);
    if (run.result) showResult(run.result);
    else document.getElementById("run-state").textContent = "running";
    return;
  }
  if (msg.type === "rig" || msg.rig !== rigName || msg.run_id !== runId) return;
  document.getElementById("unknown").hidden = true;
  if (msg.type === "event") {
    addEvent(msg.row);
    if (msg.row.kind === "run_started") document.getElementById("run-state").textContent =
      "running";
  } else if (msg.type === "power") {
    power.push(msg.point);
    if (power.length >= 4000) {  // as the server does: every other point, the whole run
      const thin = power.filter((_, i) => i % 2 === 0);
      power.length = 0;
      power.push(...thin);
    }
    drawPower();
  } else if (msg.type === "finished") {
    showResult(msg.result);
  } else if (msg.type === "grid") {
    layoutGrid(msg.grid);
  } else if (msg.type === "cell") {
    showCell(msg.cell);
  }
}

follow(`/api/stream?rig=${encodeURIComponent(rigName)}&run=${encodeURIComponent(runId)}`,
       onMessage);
