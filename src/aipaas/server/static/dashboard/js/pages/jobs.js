// Jobs: the list, a submission form, and one job's status, events and logs as they come.
import * as api from "../api.js";
import { age, card, h, number, phase, table } from "../dom.js";

/** The submission template: a queue the signed-in user can see, or a note that none can. */
function example(queue) {
  const tenant = queue ? queue.metadata.tenant : "TENANT";
  const name = queue ? queue.metadata.name : "QUEUE";
  const note = queue ? "" : "# no queue is visible to this token: create one first\n";
  return `${note}apiVersion: aipaas/v1
kind: Job
metadata: {name: my-job, tenant: ${tenant}}
spec:
  queue: ${name}
  tasks:
    - name: main
      command: [/bin/sh, -c, "echo started; sleep 2; echo done"]
      resources: {cpu: 1, memory: 64Mi}
`;
}

/** GPUs of a whole job: replicas x GPUs each; the API stores `gpu: 1` as {count: 1} and
 * `gpu: 0.5` as {count: 1, fraction: 0.5} (the CLI's GPUS column counts the same way). */
export function gpusOf(job) {
  let total = 0;
  for (const task of job.spec.tasks || []) {
    const gpu = (task.resources || {}).gpu;
    if (gpu === undefined || gpu === null) continue;
    const each = typeof gpu === "object"
      ? Number(gpu.count ?? 1) * Number(gpu.fraction || 1)
      : Number(gpu);
    total += (Number.isFinite(each) ? each : 0) * (task.replicas || 1);
  }
  return number(total);
}

const FINISHED = ["Succeeded", "Failed", "Cancelled"];
// Annotations a rerun carries (client_streams.py): the job it reruns and the first of the chain.
const RERUN_OF = "aipaas.io/rerun-of";
const RERUN_ROOT = "aipaas.io/rerun-root";
const SYSTEM = /^([a-z0-9.-]*\.)?aipaas\.dev\//;
const USER_DOMAINS = ["sim.aipaas.dev/", "kubernetes.aipaas.dev/"];
const own = (entries) => Object.fromEntries(Object.entries(entries || {}).filter(([key]) =>
  !SYSTEM.test(key) || USER_DOMAINS.some((prefix) => key.startsWith(prefix))));

/** As `aipaas rerun`: a new job ROOT-N from the job's spec; the original and its history stay. */
async function rerun(job, jobs) {
  const meta = job.metadata;
  const annotations = own(meta.annotations);
  const root = annotations[RERUN_ROOT] || meta.name;
  const taken = new Set(jobs.filter((j) => j.metadata.tenant === meta.tenant)
    .map((j) => j.metadata.name));
  let n = 2;
  const named = (k) => root.slice(0, 63 - `-${k}`.length).replace(/-+$/, "") + `-${k}`;
  while (taken.has(named(n))) n += 1;
  const manifest = {
    apiVersion: job.apiVersion || "aipaas/v1",
    kind: "Job",
    metadata: {
      name: named(n), tenant: meta.tenant, labels: own(meta.labels),
      annotations: { ...annotations, [RERUN_OF]: meta.name, [RERUN_ROOT]: root },
    },
    spec: job.spec,
  };
  const answer = await api.applyYaml(JSON.stringify(manifest));
  return answer.items[0];
}

function jobHref(name, tenant) {
  return `/dashboard/jobs?${new URLSearchParams({ name, tenant })}`;
}

function jobList(go) {
  const live = h("div");
  const editor = h("textarea", { id: "submit-text", spellcheck: "false" }, example(null));
  let edited = false;
  let templated = false;
  // Once the user is in the editor, the template never changes under them: a template that
  // arrived between a select-all and the typing would have the typed text appended to it.
  editor.addEventListener("focus", () => { edited = true; });
  editor.addEventListener("input", () => { edited = true; });
  const result = h("p", { id: "submit-result", role: "status" });
  const said = h("p", { id: "job-action-result", role: "status" });
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
  let refreshNow = async () => {};
  const act = (label, work) => async (event) => {
    event.currentTarget.disabled = true;
    try {
      said.textContent = await work();
    } catch (error) {
      said.textContent = `${label} refused: ${error.message}`;
    }
    await refreshNow();
  };
  const node = h("div", { id: "page-jobs" }, h("h1", {}, "Jobs"), said, live,
    card("Submit (YAML or JSON, as aipaas apply takes)", editor,
      h("button", { id: "submit", type: "button", onclick: submit }, "Submit"), result));
  const link = (job) => h("a",
    { href: jobHref(job.metadata.name, job.metadata.tenant), "data-go": "", class: "job-link" },
    job.metadata.name);
  const actions = (jobs) => (job) => {
    const { name, tenant } = job.metadata;
    if (!FINISHED.includes((job.status || {}).phase)) {
      return h("button", {
        type: "button", class: "job-cancel", "data-job": name,
        onclick: act("cancel", async () => {
          await api.post(`/jobs/${encodeURIComponent(name)}/cancel`, { tenant });
          return `cancelling job ${name}`;
        }),
      }, "Cancel");
    }
    return h("button", {
      type: "button", class: "job-rerun", "data-job": name,
      onclick: act("rerun", async () => {
        const item = await rerun(job, jobs);
        return `${item.action}: job ${item.name} (rerun of ${name})`;
      }),
    }, "Rerun");
  };
  const reason = (job) => {
    const status = job.status || {};
    return h("span", { class: "reason", title: status.message || "" }, status.reason || "");
  };
  const refresh = async () => {
    if (!templated) {
      templated = true;  // once: the queues a token sees change rarely
      const queues = await api.list("/queues");
      if (!edited) editor.value = example(queues[0] || null);
    }
    const items = (await api.list("/jobs")).reverse();
    live.replaceChildren(card("Jobs, newest first", table([
      ["job", link],
      ["tenant", (j) => j.metadata.tenant],
      ["queue", (j) => j.spec.queue],
      ["phase", (j) => phase((j.status || {}).phase)],
      ["reason", reason],
      ["tasks", (j) => j.spec.tasks.reduce((n, t) => n + (t.replicas || 1), 0), "num"],
      ["GPUs", gpusOf, "num"],
      ["age", (j) => age(j.metadata.creationTimestamp), "num"],
      ["", actions(items)],
    ], items, { id: "jobs" })));
  };
  refreshNow = refresh;
  return { node, stop() {}, refresh };
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
