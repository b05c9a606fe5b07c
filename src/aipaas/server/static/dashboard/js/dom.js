// Small DOM helpers: text from the API always goes in as text, never as markup.
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) {
      element.setAttribute(key, value === true ? "" : value);
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function card(title, ...children) {
  return h("section", { class: "card" }, h("h2", {}, title), ...children);
}

/** columns: [header, value(row), "num"?]; a value may be a string, number or node. */
export function table(columns, rows, attrs = {}) {
  const head = h("tr", {}, columns.map(([label, , kind]) => h("th", { class: kind }, label)));
  const body = rows.map((row) =>
    h("tr", {}, columns.map(([, value, kind]) => h("td", { class: kind }, value(row)))));
  if (!rows.length) {
    body.push(h("tr", {}, h("td", { colspan: columns.length, class: "muted" }, "none")));
  }
  return h("table", attrs, h("thead", {}, head), h("tbody", {}, body));
}

export function number(value, digits = 2) {
  if (value === null || value === undefined || value === "") return "";
  const n = Number(value);
  return Number.isInteger(n) ? String(n) : n.toFixed(digits);
}

/** A figure for an axis or a caption: two significant digits below 1, one decimal below 100. */
export function short(value) {
  const n = Number(value);
  if (n === 0 || !Number.isFinite(n)) return "0";
  if (Math.abs(n) >= 100) return n.toFixed(0);
  if (Math.abs(n) >= 1) return n.toFixed(1);
  return n.toPrecision(2);
}

/** "500m" -> 0.5, "4" -> 4 (CPU cores as the API writes them). */
export function cores(quantity) {
  if (quantity === null || quantity === undefined) return 0;
  const text = String(quantity);
  return text.endsWith("m") ? Number(text.slice(0, -1)) / 1000 : Number(text);
}

export function age(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 120) return `${Math.round(seconds)}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86400)}d`;
}

export function phase(value) {
  const text = value || "Pending";
  return h("span", { class: `phase phase-${text}` }, text);
}
