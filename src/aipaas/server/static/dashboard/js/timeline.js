// The allocation timeline (GET /api/v1/dashboard/timeline), shaped for the charts.
import * as api from "./api.js";

export async function timeline(settings, points = 60) {
  return api.get("/dashboard/timeline", { window: settings.window, points });
}

/** One chart series per queue ("tenant/queue" when several tenants show). */
export function bySeries(answer, field) {
  const tenants = new Set(answer.series.map((s) => s.tenant));
  return answer.series.map((s) => ({
    name: tenants.size > 1 ? `${s.tenant}/${s.queue}` : s.queue,
    values: s[field],
  }));
}

/** Refresh period (ms) of a page charting `settings.window`: its buckets last window/60. */
export function windowPeriod(settings) {
  if (settings.window <= 300) return 2000;
  return settings.window <= 3600 ? 5000 : 30000;
}
