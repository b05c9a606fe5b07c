// Usage (and cost, where the server prices it) over time per tenant and queue, and the totals.
import * as api from "../api.js";
import { card, h, number, table } from "../dom.js";
import { stackedChart } from "../charts.js";
import { bySeries, timeline, topSeries, windowPeriod } from "../timeline.js";

export default function usage() {
  const live = h("div");
  const node = h("div", { id: "page-usage" }, h("h1", {}, "Usage & cost"), live);
  return {
    node,
    period: windowPeriod,
    stop() {},
    async refresh(settings) {
      const [line, report, spend, prices] = await Promise.all([
        timeline(settings), api.get("/usage"),
        api.get("/dashboard/cost", { window: settings.window, points: 60 }),
        api.get("/prices").catch(() => null)]);
      const gpu = settings.resource === "gpu";
      const field = gpu ? "gpuHours" : "cpuHours";
      const kind = gpu ? "GPU" : "CPU";
      live.replaceChildren(
        card("Cost in the window, by queue", costChart(spend)),
        card(`${kind}-hours used in the window, by queue`, h("div", { id: "usage-chart" },
          stackedChart({ title: `${kind}-hours`, times: line.times, series: bySeries(line, field), unit: "h" }))),
        prices ? card("Prices", priceTable(prices)) : null,
        card("Totals (the usage ledger and what runs now)", table([
          ["tenant", (r) => r.tenant],
          ["queue", (r) => r.queue],
          ["user", (r) => r.user],
          ["GPU model", (r) => r.gpuModel],
          ["GPU-hours", (r) => number(r.gpuHours, 4), "num"],
          ["CPU-hours", (r) => number(r.cpuHours, 4), "num"],
          ["memory GiB-hours", (r) => number(r.memoryGiBHours, 4), "num"],
          ["task attempts", (r) => r.tasks, "num"],
        ], report.items, { id: "usage" })),
      );
    },
  };
}

function costChart(spend) {
  const currencies = new Set(spend.series.map((s) => s.currency));
  const tenants = new Set(spend.series.map((s) => s.tenant));
  const shaped = spend.series.map((s) => ({
    name: `${tenants.size > 1 ? s.tenant + "/" : ""}${s.queue}${currencies.size > 1 ? " " + s.currency : ""}`,
    values: s.cost,
  }));
  // Amounts in different currencies are never added up into one "other" layer.
  const series = currencies.size > 1 ? shaped : topSeries(shaped);
  const unit = currencies.size === 1 ? [...currencies][0] : "";
  const totals = Object.entries(spend.total).filter(([currency]) => currency)
    .map(([currency, amount]) => `${number(amount, 4)} ${currency}`).join(", ");
  return h("div", { id: "cost-chart" },
    stackedChart({ title: "cost", times: spend.times, series, unit }),
    h("p", { class: "muted" }, series.length ? `spent in the window: ${totals}`
      : "No price list prices this use (a platform admin writes PriceLists)."));
}

function priceTable(view) {
  const gpus = (p) => (p.spec.gpu || []).map((g) => `${g.model} ${number(g.pricePerHour, 4)}`).join(", ");
  return h("div", {},
    h("p", { class: "muted" }, view.inForce ? `in force now: ${view.inForce}` : "no price list in force now"),
    table([
      ["price list", (p) => p.metadata.name],
      ["valid", (p) => `${p.spec.validFrom} → ${p.spec.validUntil || "open"}`],
      ["currency", (p) => p.spec.currency],
      ["GPU-hour", gpus],
      ["core-hour", (p) => number(p.spec.cpuCoreHour || 0, 4), "num"],
      ["GiB-hour", (p) => number(p.spec.memoryGiBHour || 0, 4), "num"],
      ["for", (p) => ((p.spec.tenants || []).length ? p.spec.tenants.join(", ") : "every tenant")],
    ], view.items, { id: "prices" }));
}
