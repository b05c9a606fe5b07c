// Hand-made SVG charts: stacked areas over time, and per-queue share bars. No library.
import { h, number, short } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#2f6fed", "#e8710a", "#1e8e3e", "#9334e6", "#d01884", "#12b5cb", "#b7791f", "#5f6368"];
const WIDTH = 720;
const HEIGHT = 220;
const PAD = { left: 48, right: 12, top: 10, bottom: 24 };

export const colour = (i) => PALETTE[i % PALETTE.length];

function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) element.setAttribute(key, value);
  for (const child of children) element.append(child);
  return element;
}

function legend(names) {
  return h("div", { class: "legend" }, names.map((name, i) => {
    const swatch = h("i");
    swatch.style.background = colour(i);
    return h("span", {}, swatch, name);
  }));
}

function clock(iso, span) {
  const date = new Date(iso);
  return span > 2 * 86400 ? date.toLocaleDateString() + " " + date.toLocaleTimeString().slice(0, 5)
    : date.toLocaleTimeString();
}

/**
 * Series stacked over time. series: [{name, values}] on `times` (ISO strings); `limit` draws a
 * dashed line (capacity). The figure carries data-total: the sum of the last values, what a
 * reader (or a test) sees at the right edge.
 */
export function stackedChart({ title, times, series, limit, unit }) {
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const n = times.length;
  const tops = new Array(n).fill(0);
  const layers = series.map((s) => {
    const bottom = tops.slice();
    s.values.forEach((v, i) => { tops[i] += v; });
    return { bottom, top: tops.slice() };
  });
  const high = (Math.max(...tops, limit || 0) || 1) * 1.05;
  const x = (i) => PAD.left + (n <= 1 ? 0 : (i * plotW) / (n - 1));
  const y = (v) => PAD.top + plotH - (v / high) * plotH;
  const figure = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img" }, svg("title", {}, title));
  for (let k = 0; k <= 4; k++) {
    const value = (high * k) / 4;
    figure.append(svg("line", { class: "axis", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value) }));
    figure.append(svg("text", { x: PAD.left - 4, y: y(value) + 3, "text-anchor": "end" }, short(value)));
  }
  layers.forEach((layer, s) => {
    const upper = layer.top.map((v, i) => `${x(i)},${y(v)}`);
    const lower = layer.bottom.map((v, i) => `${x(i)},${y(v)}`).reverse();
    const points = upper.concat(lower).join(" ");
    figure.append(svg("polygon", { points, fill: colour(s), "fill-opacity": "0.75" },
      svg("title", {}, series[s].name)));
  });
  if (limit) {
    const level = { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(limit), y2: y(limit) };
    figure.append(svg("line", { class: "capacity", ...level },
      svg("title", {}, `capacity ${number(limit)}`)));
  }
  if (n) {
    const span = (Date.parse(times[n - 1]) - Date.parse(times[0])) / 1000;
    [[0, "start"], [Math.floor(n / 2), "middle"], [n - 1, "end"]].forEach(([i, anchor]) =>
      figure.append(svg("text", { x: x(i), y: HEIGHT - 6, "text-anchor": anchor }, clock(times[i], span))));
  }
  const total = n ? tops[n - 1] : 0;
  return h("figure", { class: "chart", "data-total": total.toFixed(6), "data-series": series.length },
    h("figcaption", { class: "muted" }, `${title} (now ${short(total)} ${unit})`), figure,
    legend(series.map((s) => s.name)),
    limit ? h("div", { class: "muted" }, `dashed: capacity ${number(limit)} ${unit}`) : null);
}

/**
 * Per-queue shares: a bar of what each queue holds and what it waits for, with ticks at its
 * fair share (solid) and its guarantee (dotted).
 * rows: [{name, allocated, pending, fairShare, guaranteed}]
 */
export function shareBars({ title, rows, unit }) {
  const rowH = 26;
  const height = PAD.top + rows.length * rowH + 20;
  const left = 160;
  const plotW = WIDTH - left - PAD.right;
  const widest = (r) => Math.max(r.allocated + r.pending, r.fairShare, r.guaranteed);
  const high = (Math.max(0, ...rows.map(widest)) || 1) * 1.05;
  const x = (v) => left + (v / high) * plotW;
  const figure = svg("svg", { viewBox: `0 0 ${WIDTH} ${height}`, role: "img" }, svg("title", {}, title));
  rows.forEach((row, i) => {
    const top = PAD.top + i * rowH;
    const say = (what, value) => svg("title", {}, `${row.name}: ${what} ${number(value)} ${unit}`);
    // A bar of `value` starting at `from`, and a tick at `value`; each says what it shows.
    const bar = (from, value, what, attrs) => svg("rect",
      { x: x(from), y: top + 4, width: x(value) - left, height: 14, ...attrs }, say(what, value));
    const tick = (value, what, attrs) => svg("line",
      { x1: x(value), x2: x(value), y1: top + 1, y2: top + 21, "stroke-width": 2, ...attrs },
      say(what, value));
    figure.append(
      svg("text", { x: left - 6, y: top + 15, "text-anchor": "end" }, row.name),
      bar(0, row.allocated, "allocated", { fill: colour(0) }),
      bar(row.allocated, row.pending, "pending", { fill: colour(1), "fill-opacity": "0.5" }),
      tick(row.fairShare, "fair share", { stroke: "#1d2433" }),
      tick(row.guaranteed, "guaranteed", { stroke: "#1e8e3e", "stroke-dasharray": "2 2" }));
  });
  figure.append(svg("text", { x: WIDTH - PAD.right, y: height - 4, "text-anchor": "end" },
    `${number(high / 1.05)} ${unit}`));
  const key = h("div", { class: "legend" },
    h("span", {}, swatch(colour(0)), "allocated"), h("span", {}, swatch(colour(1)), "pending"),
    h("span", {}, swatch("#1d2433"), "fair share (tick)"),
    h("span", {}, swatch("#1e8e3e"), "guaranteed (dotted tick)"));
  return h("figure", { class: "chart shares" }, h("figcaption", { class: "muted" }, title), figure, key);
}

function swatch(fill) {
  const element = h("i");
  element.style.background = fill;
  return element;
}

/** A budget's use: a bar to `percent` (of 100), ticks at the thresholds, a ring at the forecast. */
export function gauge(percent, thresholds, forecast) {
  const width = 160;
  const top = Math.max(100, percent, forecast, ...thresholds) * 1.05;
  const x = (p) => (p / top) * width;
  const fill = percent >= 100 ? "#c0392b" : percent >= 80 ? "#b7791f" : "#1e8e3e";
  const figure = svg("svg", { viewBox: `0 0 ${width} 16`, width, height: 16, role: "img", class: "gauge" },
    svg("title", {}, `${number(percent, 1)}% spent, forecast ${number(forecast, 1)}%`),
    svg("rect", { x: 0, y: 3, width, height: 10, fill: "#eef0f3" }),
    svg("rect", { x: 0, y: 3, width: x(percent), height: 10, fill }));
  for (const t of thresholds) {
    figure.append(svg("line", { x1: x(t), x2: x(t), y1: 0, y2: 16, stroke: "#1d2433" }));
  }
  if (forecast) figure.append(svg("circle", { cx: x(forecast), cy: 8, r: 3, fill: "none", stroke: "#1d2433" }));
  return h("span", { "data-percent": number(percent, 1) }, figure, ` ${number(percent, 1)}%`);
}
