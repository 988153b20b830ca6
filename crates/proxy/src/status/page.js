// wirefold's status page: draws /status.json as SVG and tables, every few seconds.
// Everything from the server goes into the page as text (textContent), never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const REFRESH_MS = 5000;
const WIDTH = 960;
const HEIGHT = 240;
const MARGIN = { left: 64, right: 12, top: 12, bottom: 26 };

// One colour per mechanism and content type, stable between refreshes.
const COLOURS = {
  identity: "#9aa0a6", passthrough: "#c3c9cf", gzip: "#f4a261", deflate: "#e9c46a",
  br: "#2a9d8f", zstd: "#264653", dcb: "#8338ec", dcz: "#b5179e", vcdiff: "#e76f51",
  "link-confirm": "#0077b6", "link-delta": "#00b4d8", "link-full": "#90e0ef",
  "link-stale-confirmed": "#023e8a", "link-stale-delta": "#0096c7",
  "link-stale-prefix-delta": "#48cae4", "link-stale-aborted-full": "#ade8f4",
  html: "#e76f51", css: "#2a9d8f", javascript: "#e9c46a", json: "#8338ec", xml: "#f4a261",
  text: "#264653", image: "#06d6a0", font: "#118ab2", wasm: "#6d597a", media: "#ef476f",
  other: "#9aa0a6",
};

function colour(name) {
  if (COLOURS[name]) return COLOURS[name];
  let hash = 0;
  for (const c of name) hash = (hash * 31 + c.codePointAt(0)) >>> 0;
  return `hsl(${hash % 360}, 55%, 50%)`;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? String(n) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)) + " " + units[i];
}

// "1 hit", "2 hits".
function count(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

function percent(rate) {
  return rate === null || rate === undefined ? "–" : (100 * rate).toFixed(1) + " %";
}

function ms(value) {
  if (value === null || value === undefined) return "–";
  if (value < 0) return "> 16 s";
  return value < 10 ? value.toFixed(2) + " ms" : value.toFixed(0) + " ms";
}

function bitsPerSecond(value) {
  if (value === null || value === undefined) return "–";
  const units = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s"];
  let i = 0;
  while (value >= 1000 && i < units.length - 1) { value /= 1000; i++; }
  return value.toFixed(value < 10 ? 2 : 1) + " " + units[i];
}

function element(name, attributes, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// A stacked bar per minute: one <path> per series, made of one rectangle per minute
// with a saving, stacked in the order given (largest total at the bottom).
function drawChart(svg, legend, minutes, series) {
  svg.replaceChildren();
  legend.replaceChildren();
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const slot = plotWidth / minutes.length;
  const stacked = minutes.map((_, i) => series.reduce((sum, s) => sum + s.values[i], 0));
  const peak = Math.max(0, ...stacked);
  const top = niceCeiling(peak);
  for (let t = 0; t <= 4; t++) {
    const y = MARGIN.top + plotHeight - (plotHeight * t) / 4;
    svg.append(element("line", { class: "grid", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y, y2: y }));
    svg.append(element("text", { class: "axis", x: MARGIN.left - 6, y: y + 4, "text-anchor": "end" }, bytes((top * t) / 4)));
  }
  for (const ago of [60, 45, 30, 15, 0]) {
    const x = MARGIN.left + plotWidth - (ago / minutes.length) * plotWidth;
    const label = ago === 0 ? "now" : `−${ago} min`;
    svg.append(element("text", { class: "axis", x, y: HEIGHT - 8, "text-anchor": ago === 0 ? "end" : "middle" }, label));
  }
  if (peak === 0) {
    svg.append(element("text", { class: "empty", x: WIDTH / 2, y: HEIGHT / 2, "text-anchor": "middle" },
      "nothing saved in the last hour yet"));
    return 0;
  }
  const base = minutes.map(() => 0);
  const width = Math.max(1, slot - 2);
  for (const s of series) {
    let d = "";
    s.values.forEach((value, i) => {
      if (value <= 0) return;
      const h = (value / top) * plotHeight;
      const x = MARGIN.left + i * slot + 1;
      const y = MARGIN.top + plotHeight - (base[i] / top) * plotHeight - h;
      d += `M${x.toFixed(1)} ${y.toFixed(1)}h${width.toFixed(1)}v${h.toFixed(1)}h${(-width).toFixed(1)}Z`;
      base[i] += value;
    });
    const path = element("path", { d, fill: colour(s.name), "data-series": s.name });
    path.append(element("title", {}, `${s.name}: ${bytes(s.total)} saved`));
    svg.append(path);
    const key = document.createElement("span");
    key.style.setProperty("--swatch", colour(s.name));
    key.textContent = `${s.name} ${bytes(s.total)}`;
    legend.append(key);
  }
  return series.length;
}

// 1, 2 or 5 times a power of ten, at least `value`.
function niceCeiling(value) {
  if (value <= 0) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(value)));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function table(id, headings, rows) {
  const t = document.getElementById(id);
  t.replaceChildren();
  const head = t.insertRow();
  for (const h of headings) {
    const th = document.createElement("th");
    th.textContent = h;
    head.append(th);
  }
  if (rows.length === 0) {
    const cell = t.insertRow().insertCell();
    cell.colSpan = headings.length;
    cell.className = "none";
    cell.textContent = "none yet";
    return;
  }
  for (const row of rows) {
    const tr = t.insertRow();
    row.forEach((value, i) => {
      const td = tr.insertCell();
      td.textContent = value;
      if (i === 0) { td.className = "name"; td.title = value; }
    });
  }
}

function list(id, pairs) {
  const dl = document.getElementById(id);
  dl.replaceChildren();
  for (const [term, value] of pairs) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    dl.append(dt, dd);
  }
}

function rows(entries) {
  return entries.map((r) => [r.name, r.responses, bytes(r.original), bytes(r.sent), bytes(r.saved)]);
}

function draw(status) {
  const t = status.totals;
  document.getElementById("saved").textContent = `${bytes(t.saved)} (${percent(t.original ? t.saved / t.original : null)})`;
  document.getElementById("original").textContent = bytes(t.original);
  document.getElementById("requests").textContent = String(status.requests);
  const drawn =
    drawChart(document.getElementById("chart-mechanism"), document.getElementById("legend-mechanism"),
      status.minutes, status.saved_by_mechanism) +
    drawChart(document.getElementById("chart-content-type"), document.getElementById("legend-content-type"),
      status.minutes, status.saved_by_content_type);

  const headings = ["", "responses", "original", "sent", "saved"];
  table("mechanisms", ["mechanism", ...headings.slice(1)], rows(status.mechanisms));
  table("content-types", ["content type", ...headings.slice(1)], rows(status.content_types));

  const cache = status.cache.counts;
  list("rates", [
    ["HTTP cache", `${percent(status.cache.hit_rate)} served from the cache`],
    ["", `${count(cache.hit, "hit", "hits")}, ${cache.stale} stale, ${cache.revalidated} revalidated, ${count(cache.miss, "miss", "misses")}`],
    ["", `${cache.bypass} bypassed, ${cache.file} from files`],
    ["kept encodings", `${percent(status.encoding_cache.hit_rate)} found (since start)`],
    ["", `${count(status.encoding_cache.hit, "hit", "hits")}, ${count(status.encoding_cache.quick_hit, "quick hit", "quick hits")}, ${count(status.encoding_cache.miss, "miss", "misses")}`],
  ]);

  const o = status.origin;
  list("origin", [
    ["exchanges", String(o.exchanges)],
    ["mean", ms(o.mean_ms)],
    ["median", o.p50_ms === null ? "–" : "≤ " + ms(o.p50_ms)],
    ["95th percentile", o.p95_ms === null ? "–" : "≤ " + ms(o.p95_ms)],
    ["longest", ms(o.max_ms)],
  ]);

  table("resources", ["resource", "saved", "responses"],
    status.top_resources.map((r) => [r.name, bytes(r.saved), r.responses]));

  list("dictionary-counts", [
    ["announced", `${count(status.dictionaries.announced, "response", "responses")} offered one (last hour)`],
    ["used", `${count(status.dictionaries.used, "response", "responses")} compressed against one (last hour)`],
  ]);
  table("dictionaries", ["dictionary (SHA-256)", "saved", "responses"],
    status.dictionaries.top.map((r) => [r.name.slice(0, 16) + "…", bytes(r.saved), r.responses]));

  const link = status.link;
  const latest = link.latest;
  list("link", [
    ["link requests", String(link.exchanges)],
    ["delivery rate", latest ? `${bitsPerSecond(latest.rate_bps)} now, ${bitsPerSecond(link.mean_rate_bps)} mean` : "no link request yet"],
    ["round trip", latest ? `${ms(latest.rtt_ms)} now, ${ms(link.mean_rtt_ms)} mean` : "–"],
  ]);
  table("link-outcomes", ["frames ending", "responses", "original", "on the link", "saved"], rows(link.outcomes));

  document.getElementById("config").textContent = status.config;
  document.getElementById("updated").textContent = "updated " + new Date(status.now * 1000).toLocaleTimeString();
  document.getElementById("error").textContent = "";
  // Tests (and the curious) see that the charts were drawn, and how many series.
  document.documentElement.dataset.drawn = String(drawn);
}

async function refresh() {
  try {
    const response = await fetch("/status.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`status.json: ${response.status}`);
    draw(await response.json());
  } catch (e) {
    document.getElementById("error").textContent = `not updated: ${e.message}`;
  }
}

draw(JSON.parse(document.getElementById("initial-status").textContent));
setInterval(refresh, REFRESH_MS);
