// Queues: guarantee, fair share, what each holds and waits for, as numbers and as bars.
import * as api from "../api.js";
import { card, cores, h, number, table } from "../dom.js";
import { shareBars } from "../charts.js";

function amount(status, part, resource) {
  const value = ((status || {})[part] || {})[resource];
  return resource === "gpu" ? Number(value || 0) : cores(value);
}

export default function queues({ who }) {
  const live = h("div");
  const node = h("div", { id: "page-queues" }, h("h1", {}, "Queues"), live);
  const several = !who.tenant;
  return {
    node,
    stop() {},
    async refresh(settings) {
      const items = await api.list("/queues");
      const resource = settings.resource;
      const name = (q) => (several ? `${q.metadata.tenant}/${q.metadata.name}` : q.metadata.name);
      const rows = items.map((q) => ({
        name: name(q),
        queue: q,
        guaranteed: amount(q.status, "guaranteed", resource),
        fairShare: amount(q.status, "fairShare", resource),
        allocated: amount(q.status, "allocated", resource),
        pending: amount(q.status, "pending", resource),
      }));
      const unit = resource === "gpu" ? "GPUs" : "cores";
      live.replaceChildren(
        card(`Shares (${unit})`, shareBars({ title: `per-queue ${unit}`, rows, unit })),
        card("Queues", table([
          ["queue", (r) => r.name],
          ["parent", (r) => r.queue.spec.parent || ""],
          ["weight", (r) => number(r.queue.spec.weight), "num"],
          [`guaranteed ${unit}`, (r) => number(r.guaranteed), "num"],
          [`fair share ${unit}`, (r) => number(r.fairShare), "num"],
          [`allocated ${unit}`, (r) => number(r.allocated), "num"],
          [`pending ${unit}`, (r) => number(r.pending), "num"],
          ["running jobs", (r) => (r.queue.status || {}).runningJobs || 0, "num"],
          ["pending jobs", (r) => (r.queue.status || {}).pendingJobs || 0, "num"],
        ], rows, { id: "queues" })),
      );
    },
  };
}
