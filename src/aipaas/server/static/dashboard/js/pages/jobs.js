// Jobs: the list, a submission form, and one job's status, events and logs as they come.
import * as api from "../api.js";
import { age, card, h, phase, table } from "../dom.js";

const EXAMPLE = `apiVersion: aipaas/v1
kind: Job
metadata: {name: my-job}
spec:
  queue: default
  tasks:
    - name: main
      command: [/bin/sh, -c, "echo started; sleep 2; echo done"]
      resources: {cpu: 1, memory: 64Mi}
`;

const gpusOf = (job) => job.spec.tasks.reduce(
  (sum, t) => sum + (t.replicas || 1) * Number((t.resources || {}).gpu || 0), 0);

function jobHref(name, tenant) {
  return `/dashboard/jobs?${new URLSearchParams({ name, tenant })}`;
}

function jobList(go) {
  const live = h("div");
  const editor = h("textarea", { id: "submit-text", spellcheck: "false" }, EXAMPLE);
  const result = h("p", { id: "submit-result", role: "status" });
  const submit = async () => {
    try {
      const answer = await api.applyYaml(editor.value);
      const item = answer.items[0];
      result.textContent = `${item.action}: ${item.kind} ${item.name}`;
      if (item.kind === "Job") go(jobHref(item.name, item.object.metadata.tenant));
    } catch (error) {
      result.textContent = `refused: ${error.message}`;
    }
  };
  const node = h("div", { id: "page-jobs" }, h("h1", {}, "Jobs"), live,
    card("Submit (YAML or JSON, as aipaas apply takes)", editor,
      h("button", { id: "submit", type: "button", onclick: submit }, "Submit"), result));
  const link = (job) => h("a",
    { href: jobHref(job.metadata.name, job.metadata.tenant), "data-go": "", class: "job-link" },
    job.metadata.name);
  return {
    node,
    stop() {},
    async refresh() {
      const items = (await api.list("/jobs")).reverse();
      live.replaceChildren(card("Jobs, newest first", table([
        ["job", link],
        ["tenant", (j) => j.metadata.tenant],
        ["queue", (j) => j.spec.queue],
        ["phase", (j) => phase((j.status || {}).phase)],
        ["tasks", (j) => j.spec.tasks.reduce((n, t) => n + (t.replicas || 1), 0), "num"],
        ["GPUs", gpusOf, "num"],
        ["age", (j) => age(j.metadata.creationTimestamp), "num"],
      ], items, { id: "jobs" })));
    },
  };
}

function jobDetail(name, tenant) {
  const summary = h("div");
  const events = h("div");
  const logs = h("pre", { class: "logs", id: "logs" });
  const note = h("p", { class: "muted", id: "logs-note" }, "following…");
  const stopper = new AbortController();
  let finished = false;
  const follow = async () => {
    // The server ends the stream when the job ends; a stream cut short is taken up again.
    while (!stopper.signal.aborted) {
      logs.textContent = "";
      try {
        await api.followLogs(name, { tenant }, (text) => { logs.append(text); }, stopper.signal);
      } catch (error) {
        if (stopper.signal.aborted) return;
        note.textContent = `logs: ${error.message}`;
      }
      if (finished) { note.textContent = "the job has ended: these are all its logs"; return; }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  const node = h("div", { id: "page-job" },
    h("p", {}, h("a", { href: "/dashboard/jobs", "data-go": "" }, "← all jobs")),
    h("h1", {}, `Job ${name}`), summary, events, card("Logs", note, logs));
  follow();
  return {
    node,
    stop() { stopper.abort(); },
    async refresh() {
      const job = await api.get(`/jobs/${encodeURIComponent(name)}`, { tenant });
      const status = job.status || {};
      finished = ["Succeeded", "Failed", "Cancelled"].includes(status.phase);
      const list = await api.list("/events", { kind: "Job", name, tenant });
      summary.replaceChildren(card("Status",
        h("p", {}, "phase ", h("span", { id: "job-phase" }, phase(status.phase)),
          ` ${status.reason || ""} ${status.message || ""}`),
        table([
          ["task", (t) => t.name],
          ["phase", (t) => phase(t.phase)],
          ["node", (t) => t.node || ""],
          ["GPUs", (t) => (t.gpus || []).join(", ")],
          ["exit code", (t) => (t.exitCode ?? ""), "num"],
          ["restarts", (t) => t.restarts || 0, "num"],
        ], status.tasks || [], { id: "tasks" })));
      events.replaceChildren(card("Events", table([
        ["time", (e) => new Date(e.timestamp).toLocaleTimeString()],
        ["type", (e) => h("span", { class: e.type }, e.type)],
        ["reason", (e) => e.reason],
        ["message", (e) => e.message],
      ], list, { id: "events" })));
    },
  };
}

export default function jobs({ params, go }) {
  const name = params.get("name");
  return name ? jobDetail(name, params.get("tenant") || undefined) : jobList(go);
}
