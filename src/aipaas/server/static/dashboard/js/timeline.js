// The allocation timeline (GET /api/v1/dashboard/timeline), shaped for the charts.
import * as api from "./api.js";

/** Series drawn one by one; the rest are summed into one layer, so that colours stay legible. */
const SHOWN = 7;

export async function timeline(settings, points = 60) {
  return api.get("/dashboard/timeline", { window: settings.window, points });
}

/** One chart series per queue ("tenant/queue" when several tenants show), largest first. */
export function bySeries(answer, field) {
  const tenants = new Set(answer.series.map((s) => s.tenant));
  return topSeries(answer.series.map((s) => ({
    name: tenants.size > 1 ? `${s.tenant}/${s.queue}` : s.queue,
    values: s[field],
  })));
}

/** The SHOWN largest series (by their sum) and, when more, one "other" series of the rest. */
export function topSeries(series) {
  const total = (s) => s.values.reduce((sum, v) => sum + v, 0);
  const sorted = series.slice().sort((a, b) => total(b) - total(a));
  if (sorted.length <= SHOWN + 1) return sorted;
  const rest = sorted.slice(SHOWN);
  const values = rest[0].values.map((_, i) => rest.reduce((sum, s) => sum + s.values[i], 0));
  return sorted.slice(0, SHOWN).concat([{ name: `other (${rest.length} queues)`, values }]);
}

/** Refresh period (ms) of a page charting `settings.window`: its buckets last window/60. */
export function windowPeriod(settings) {
  if (settings.window <= 300) return 2000;
  return settings.window <= 3600 ? 5000 : 30000;
}
