// The cluster: nodes, GPUs by model, and what is allocated over time.
import * as api from "../api.js";
import { card, cores, h, number, table } from "../dom.js";
import { stackedChart } from "../charts.js";
import { bySeries, timeline, windowPeriod } from "../timeline.js";

function gpusByModel(nodes) {
  const models = new Map();
  for (const node of nodes) {
    const gpus = node.spec.gpus || {};
    if (!gpus.count) continue;
    const name = gpus.model || "(unnamed)";
    const row = models.get(name) || { model: name, nodes: 0, gpus: 0, allocated: 0 };
    row.nodes += 1;
    row.gpus += gpus.count;
    row.allocated += (node.status && node.status.allocatedGpus) || 0;
    models.set(name, row);
  }
  return [...models.values()];
}

function nodeGpus(node) {
  const gpus = node.spec.gpus || {};
  const held = (node.status || {}).allocatedGpus || 0;
  return `${number(held)} / ${gpus.count || 0} ${gpus.model || ""}`;
}

function stat(label, value, id) {
  return h("div", { class: "stat", id }, h("b", {}, value), label);
}

export default function cluster() {
  const live = h("div");
  const node = h("div", { id: "page-cluster" }, h("h1", {}, "Cluster"), live);
  return {
    node,
    period: windowPeriod,
    stop() {},
    async refresh(settings) {
      const [nodes, line] = await Promise.all([api.list("/nodes"), timeline(settings)]);
      const ready = nodes.filter((n) => !n.status || n.status.ready !== false);
      const gpuTotal = ready.reduce((sum, n) => sum + ((n.spec.gpus || {}).count || 0), 0);
      const gpuUsed = nodes.reduce((sum, n) => sum + ((n.status || {}).allocatedGpus || 0), 0);
      const cpuTotal = ready.reduce((sum, n) => sum + cores(n.spec.cpu), 0);
      const cpuUsed = nodes.reduce((sum, n) => sum + cores((n.status || {}).allocatedCpu), 0);
      const gpu = settings.resource === "gpu";
      live.replaceChildren(
        h("div", { class: "cards" },
          stat("nodes ready", `${ready.length} / ${nodes.length}`, "stat-nodes"),
          stat("GPUs allocated", `${number(gpuUsed)} / ${gpuTotal}`, "stat-gpus"),
          stat("CPU cores allocated", `${number(cpuUsed)} / ${number(cpuTotal)}`, "stat-cpus")),
        card(`Allocated ${gpu ? "GPUs" : "CPU cores"} over time, by queue`,
          stackedChart({
            title: `allocated ${gpu ? "GPUs" : "CPU cores"}`,
            times: line.times,
            series: bySeries(line, settings.resource),
            limit: line.capacity[settings.resource],
            unit: gpu ? "GPUs" : "cores",
          })),
        card("GPUs by model", table([
          ["model", (r) => r.model],
          ["nodes", (r) => r.nodes, "num"],
          ["GPUs", (r) => r.gpus, "num"],
          ["allocated", (r) => number(r.allocated), "num"],
        ], gpusByModel(nodes), { id: "gpu-models" })),
        card("Nodes", table([
          ["node", (n) => n.metadata.name],
          ["backend", (n) => n.spec.backend],
          ["ready", (n) => (!n.status || n.status.ready !== false ? "yes" : "no")],
          ["GPUs", nodeGpus],
          ["CPU", (n) => `${number(cores((n.status || {}).allocatedCpu))} / ${number(cores(n.spec.cpu))}`],
          ["memory", (n) => `${(n.status || {}).allocatedMemory || 0} / ${n.spec.memory}`],
        ], nodes, { id: "nodes" })),
      );
    },
  };
}
