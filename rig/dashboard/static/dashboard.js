"use strict";
// Shared by the pages: building elements from data (always as text, never as markup),
// number formatting, the sparkline, and the event stream with its banner.

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

function si(value, unit, digits = 3) {
  if (value === null || value === undefined || !isFinite(value)) return "";
  const prefixes = [[1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""], [1e-3, "m"], [1e-6, "µ"],
                    [1e-9, "n"]];
  const a = Math.abs(value);
  for (const [scale, p] of prefixes) {
    if (a >= scale * 0.9995) return (value / scale).toPrecision(digits) + " " + p + unit;
  }
  return value === 0 ? "0 " + unit : value.toExponential(2) + " " + unit;
}

// Set a node's text only when it changes: a card is redrawn at every power summary, and an
// unchanged DOM costs the browser nothing.
function put(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

const two = (n) => String(n).padStart(2, "0");

function clock(epochS) {  // local HH:MM:SS (cheaper than toLocaleTimeString, redrawn often)
  if (!epochS) return "";
  const d = new Date(epochS * 1000);
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

function duration(s) {
  if (s === null || s === undefined || !isFinite(s) || s < 0) return "";
  if (s < 1) return "< 1 s";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h} h ${m} min` : m ? `${m} min ${r} s` : `${r} s`;
}

// A polyline of `values` (numbers) filling an SVG of the given viewBox size (one element,
// reused: a card is redrawn at every power summary).
function polyline(svg, values, width, height) {
  const finite = values.filter((v) => isFinite(v));
  let line = svg.firstChild;
  if (finite.length < 2) { if (line) svg.removeChild(line); return; }
  let lo = Math.min(...finite), hi = Math.max(...finite);
  if (hi - lo < 1e-12) { lo -= 1e-12; hi += 1e-12; }
  const pts = values.map((v, i) => {
    const x = (i / (values.length - 1)) * width;
    const y = height - 2 - ((v - lo) / (hi - lo)) * (height - 4);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  if (!line) line = svg.appendChild(document.createElementNS(SVG_NS, "polyline"));
  line.setAttribute("points", pts.join(" "));
}

// The server's state stream: `onMessage(msg)` for each snapshot and update; a banner while the
// broker or the server is away. EventSource reconnects by itself and the server then sends
// the whole current state first.
function follow(url, onMessage) {
  const banner = document.getElementById("banner");
  let broker = {connected: true};
  let server = true;
  function show() {
    let text = "";
    if (!server) text = "lost the dashboard server: reconnecting…";
    else if (!broker.connected) {
      text = "broker unreachable since " + clock(broker.since) +
             (broker.reason ? ` (${broker.reason})` : "") +
             ": rigs as last seen; reconnecting…";
    }
    banner.textContent = text;
    banner.hidden = !text;
    document.body.classList.toggle("stale", !!text);
  }
  function take(msg) {
    if (msg.broker) { broker = msg.broker; show(); }
    if (msg.dropped) showDropped(msg.dropped);
    onMessage(msg);
  }
  const source = new EventSource(url);
  source.onopen = () => { server = true; show(); };
  source.onerror = () => { server = false; show(); };
  source.onmessage = (ev) => {
    server = true;
    const msg = JSON.parse(ev.data);
    if (msg.type === "batch") { for (const u of msg.updates) take(u); } else { take(msg); }
    show();
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  };
  return source;
}

function showDropped(dropped) {
  const node = document.getElementById("dropped");
  if (!node) return;
  const total = Object.values(dropped).reduce((a, b) => a + b, 0);
  node.textContent = total ? `${total} bad messages dropped` : "";
  node.title = Object.entries(dropped).map(([k, v]) => `${k}: ${v}`).join(", ");
  node.dataset.total = String(total);
}
