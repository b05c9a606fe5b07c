"""kube-scheduler and aipaas side by side on one real Kubernetes control plane (issue 26).

Each run starts a fresh cluster with scripts/kube_cluster.sh (etcd, kube-apiserver 1.37.2,
kube-scheduler with its default profile, kwok playing the kubelets, an audit log), publishes
KWOK GPU nodes with the fake DRA driver (aipaas.backends.kubernetes.fake_dra: NVIDIA's
attribute names), and creates pods as any user would: each pod with a ResourceClaim of its own
(DeviceClass gpu.nvidia.com). The pods name ``default-scheduler`` or ``aipaas`` as their
scheduler; aipaas runs as a real ``aipaas server --backend kubernetes`` process that takes
others' pods (the import step) and holds only deploy/kubernetes/rbac.yaml's role. The
``kueue`` rows (single and gangs only) are kube-scheduler with Kueue v0.17.0 in front of it as
an admission layer: Kueue gates each pod until its queue admits it (a gang as a Kueue plain pod
group of 8), kube-scheduler binds (benchmarks/_kube_kueue.py says how Kueue is run).

Scenarios:
  single  N single-pod jobs, each claiming one GPU: pods bound per second (first pod created
          to last pod bound), creation-to-binding latency p50/p99 (both seen by one watch of
          this script, with the same clock for both schedulers), API requests per bound pod
          (the audit log's requests by the scheduler's user, and Kueue's), CPU seconds of the
          scheduler's process (and Kueue's).
  openb   the openb default trace (shared data) on its 1,213 GPU nodes, each GPU a shareable
          DRA device, its pods with claims for whole GPUs or a share (consumable capacity),
          created in the openb benchmarks' order until the first pod is refused: the GPU
          allocation then (benchmarks/_kube_openb.py says exactly how). aipaas places with its
          server's default profile (FGD with the CPU-stranding term, best fit, DRA topology).
  gangs   G gangs of 8 pods (a Volcano PodGroup of minMember 8 for aipaas; kube-scheduler's
          default profile has no gangs) that together ask more GPUs than exist: time until
          binding stops, gangs bound whole, gangs left partly bound.

    .venv/bin/python benchmarks/kube_side_by_side.py [--nodes 500 --gpus 8 --pods 5000
        --gangs 200 --gang-gpus 4 --scenarios single,openb,gangs
        --schedulers kube-scheduler,aipaas,kueue]
        [--out docs/results/kubernetes.md]

Writes the table to stdout and, with --out, the results document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from _kube_kueue import USER as KUEUE_USER
from _kube_kueue import kueue, queue_pod
from _kube_openb import OpenbTrace, load_trace, replay
from _kube_report import Run, table, targets
from aipaas.backends.kubernetes.api import KubeApi
from aipaas.backends.kubernetes.fake_dra import publish, uniform
from aipaas.backends.kubernetes.options import KubeOptions

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "kube_cluster.sh"
AIPAAS = str(Path(sys.executable).parent / "aipaas")
NAMESPACE = "bench"
TOKEN = "kube-bench-admin-token"
SETUP = """apiVersion: aipaas/v1
kind: Tenant
metadata: {name: bench}
spec: {quota: {gpu: 100000, cpu: 1000000, memory: 100000Ti}}
---
apiVersion: aipaas/v1
kind: Queue
metadata: {name: default, tenant: bench}
"""
#: whose requests count for a row: the scheduler's (Kueue's rows: kube-scheduler's and Kueue's)
USERS = {
    "kube-scheduler": ("system:kube-scheduler",),
    "aipaas": ("aipaas",),
    "kueue": ("system:kube-scheduler", KUEUE_USER),
}
SCHEDULER_NAMES = {
    "kube-scheduler": "default-scheduler",
    "aipaas": "aipaas",
    "kueue": "default-scheduler",
}
#: the name of a row in the table
ROW_NAMES = {"kueue": "kube-scheduler + Kueue"}


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process, its reaped children and its live descendants (a
    server's worker processes), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0  # ended meanwhile
    ticks = os.sysconf("SC_CLK_TCK")
    own = sum(int(f) for f in fields[11:15]) / ticks
    return own + sum(cpu_seconds(child) for child in _children(pid))


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


class Watcher:
    """One watch of the namespace's pods: when each was first seen bound (monotonic)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api.fork()
        self.bound_at: dict[str, float] = {}
        self.stop = threading.Event()
        _, self.version = self.api.list_with_version("Pod", namespace=NAMESPACE)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for event in self.api.watch("Pod", self.version, timeout_seconds=30):
                    obj = event["object"]
                    self.version = obj["metadata"].get("resourceVersion", self.version)
                    name = obj["metadata"].get("name")
                    if (obj.get("spec") or {}).get("nodeName") and name not in self.bound_at:
                        self.bound_at[name] = time.monotonic()
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.1)


@contextmanager
def cluster(state: Path) -> Iterator[KubeApi]:
    env = {**os.environ, "AIPAAS_KUBE_STATE": str(state)}
    subprocess.run(
        ["bash", str(SCRIPT), "start", str(state), "--scheduler", "--kwok", "--audit"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    api = KubeApi.connect(KubeOptions(kubeconfig=str(state / "admin.kubeconfig")))
    try:
        yield api
    finally:
        api.close()
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, check=False)


def grant_aipaas(api: KubeApi) -> None:
    for document in yaml.safe_load_all((ROOT / "deploy/kubernetes/rbac.yaml").read_text()):
        if document and document["kind"] == "ClusterRole":
            api.create(document)
    api.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "aipaas-bench"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "aipaas-scheduler",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "aipaas"}
            ],
        }
    )
    for document in yaml.safe_load_all((ROOT / "deploy/kube-build/podgroup-crds.yaml").read_text()):
        api.create(document)


@contextmanager
def aipaas_server(state: Path, profile: Path | None = None) -> Iterator[int]:
    """An aipaas server on the cluster as the user aipaas; yields its pid. With ``profile``,
    under benchmarks/_kube_profile.py's sampler, which writes that file at the end."""
    port = _free_port()
    data = state / "aipaas"
    env = {
        **os.environ,
        "AIPAAS_BOOTSTRAP_TOKEN": TOKEN,
        "AIPAAS_KUBE_CONFIG": str(state / "aipaas.kubeconfig"),
        "AIPAAS_KUBE_DEFAULT_QUEUE": "default",
        "AIPAAS_KUBE_SETTLE_SECONDS": "0",
    }
    command = [AIPAAS, "server", "--data-dir", str(data), "--host", "127.0.0.1"]
    if profile is not None:
        sampler = str(ROOT / "benchmarks" / "_kube_profile.py")
        command = [sys.executable, sampler, str(profile), *command[1:]]
    command += ["--port", str(port), "--backend", "kubernetes", "--log-level", "warning"]
    data.mkdir(parents=True, exist_ok=True)
    log = (data / "server.log").open("ab")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        cli = {**env, "AIPAAS_URL": url, "AIPAAS_TOKEN": TOKEN}
        for text in (SETUP, (ROOT / "examples/dra/nvidia-classes.yaml").read_text()):
            done = subprocess.run(
                [AIPAAS, "apply", "-f", "-"], input=text, text=True, env=cli, capture_output=True
            )
            if done.returncode != 0:
                raise RuntimeError(f"aipaas apply failed: {done.stdout}{done.stderr}")
        time.sleep(3)  # the backend's informers list the cluster once
        yield process.pid
    finally:
        try:  # the server's own counters (cycles and their durations), kept with the run
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            got = httpx.get(f"{url}/metrics", headers=bearer, timeout=10)
            (data / "metrics.txt").write_text(got.text)
        except httpx.HTTPError:
            pass
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def claim(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus}}
                ]
            }
        },
    }


def pod(name: str, scheduler: str, group: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": {"bench": "1"}}
    if group is not None:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": SCHEDULER_NAMES[scheduler],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
        },
    }


def create_all(api: KubeApi, documents: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, float]:
    """Create the (claim, pod) pairs with 8 clients; when each pod was created (monotonic)."""
    created: dict[str, float] = {}
    clients = [api.fork() for _ in range(8)]

    def one(index: int) -> None:
        client = clients[index % len(clients)]
        name, document = documents[index]
        client.create(claim(f"{name}-gpu", document["gpus"]))
        client.create(document["pod"])
        created[name] = time.monotonic()

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        list(pool.map(one, range(len(documents))))
    for client in clients:
        client.close()
    return created


def count_requests(state: Path, users: Sequence[str]) -> int:
    count = 0
    with (state / "audit.log").open() as audit:
        for line in audit:
            entry = json.loads(line)
            stage = entry.get("stage")
            if entry.get("user", {}).get("username") not in users:
                continue
            if stage == "ResponseComplete" or (
                stage == "ResponseStarted" and entry.get("verb") == "watch"
            ):
                count += 1
    return count


def wait_settled(watcher: Watcher, total: int, quiet: float, limit: float) -> None:
    """Until every pod is bound, or nothing was bound for ``quiet`` seconds."""
    deadline = time.monotonic() + limit
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline and len(watcher.bound_at) < total:
        if len(watcher.bound_at) != last:
            last, since = len(watcher.bound_at), time.monotonic()
        elif time.monotonic() - since > quiet:
            return
        time.sleep(0.1)


def run_openb(scheduler: str, trace: OpenbTrace, args: argparse.Namespace, workdir: Path) -> Run:
    """Scenario (b): the openb replay until the first pod is refused."""
    state = Path(tempfile.mkdtemp(prefix=f"{scheduler}-openb-", dir=workdir))
    result = Run(scheduler, "openb", gpus_total=trace.total_gpus)
    with cluster(state) as api:
        grant_aipaas(api)
        publish(api, trace.nodes, kwok=True, workers=8)
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        profile = args.profile and args.profile.with_suffix(".openb.txt")
        with _scheduler_process(scheduler, state, profile) as pids:
            before = sum(cpu_seconds(pid) for pid in pids)
            requests_before = count_requests(state, USERS[scheduler])
            watcher = Watcher(api)
            outcome = replay(
                api,
                watcher.bound_at,
                NAMESPACE,
                SCHEDULER_NAMES[scheduler],
                trace,
                chunk=args.openb_chunk,
                limit=args.openb_limit,
            )
            watcher.stop.set()
            result.cpu_seconds = sum(cpu_seconds(pid) for pid in pids) - before
            time.sleep(1.5)  # the audit log is written in batches
            result.requests = count_requests(state, USERS[scheduler]) - requests_before
        created = outcome.created_at
        result.pods = outcome.created
        result.bound = outcome.bound
        result.seconds = outcome.seconds
        result.gpus_bound = outcome.gpus_bound
        result.first_refused = outcome.first_refused
        result.lower_bound = outcome.timed_out
        if outcome.first_refused:
            index = int(outcome.first_refused.removeprefix("o"))
            asked = trace.arrivals[index]
            print(
                f"openb, {scheduler}: {outcome.first_refused} (cpu {asked.cpu_milli}m, "
                f"{asked.gpu_count} GPU x {asked.gpu_milli} milli) refused: {outcome.why}",
                flush=True,
            )
        bound = watcher.bound_at
        result.latencies = [bound[n] - created[n] for n in created if n in bound]
    return result


def run_scenario(scheduler: str, scenario: str, args: argparse.Namespace, workdir: Path) -> Run:
    state = Path(tempfile.mkdtemp(prefix=f"{scheduler}-{scenario}-", dir=workdir))
    result = Run(ROW_NAMES.get(scheduler, scheduler), scenario)
    with cluster(state) as api:
        grant_aipaas(api)
        publish(api, uniform(args.nodes, args.gpus, prefix="kwok-node"), kwok=True, workers=8)
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        if scenario == "single":
            pods_by_name = {f"p{i:05d}": pod(f"p{i:05d}", scheduler) for i in range(args.pods)}
            documents = [(name, {"gpus": 1, "pod": one}) for name, one in pods_by_name.items()]
            if scheduler == "kueue":
                for name, _ in documents:
                    queue_pod(pods_by_name[name], None, 1)
        else:
            documents = []
            for g in range(args.gangs):
                group = f"g{g:04d}"
                if scheduler == "aipaas":
                    api.create(
                        {
                            "apiVersion": "scheduling.volcano.sh/v1beta1",
                            "kind": "PodGroup",
                            "metadata": {"name": group, "namespace": NAMESPACE},
                            "spec": {"minMember": 8},
                        },
                        "PodGroup.scheduling.volcano.sh",
                    )
                for m in range(8):
                    name = f"{group}-{m}"
                    member = pod(name, scheduler, group)
                    if scheduler == "kueue":
                        queue_pod(member, group, 8)
                    documents.append((name, {"gpus": args.gang_gpus, "pod": member}))
        result.pods = len(documents)
        profile = args.profile and args.profile.with_suffix(f".{scenario}.txt")
        # Kueue's quota: as many pods at once as the cluster has GPUs for (Kueue 0.17 cannot
        # count the GPUs of claims named by resourceClaimName; benchmarks/_kube_kueue.py)
        per_pod = 1 if scenario == "single" else args.gang_gpus
        admitted = args.nodes * args.gpus // per_pod
        with _scheduler_process(scheduler, state, profile, admitted) as pids:
            before = sum(cpu_seconds(pid) for pid in pids)
            requests_before = count_requests(state, USERS[scheduler])
            watcher = Watcher(api)
            started = time.monotonic()
            created = create_all(api, documents)
            wait_settled(watcher, len(documents), quiet=args.quiet, limit=args.limit)
            watcher.stop.set()
            result.cpu_seconds = sum(cpu_seconds(pid) for pid in pids) - before
            time.sleep(1.5)  # the audit log is written in batches
            result.requests = count_requests(state, USERS[scheduler]) - requests_before
        bound = watcher.bound_at
        _write_timeline(state / "timeline.csv", started, created, bound)
        result.bound = len(bound)
        if bound:
            result.seconds = max(bound.values()) - started
        result.latencies = [bound[n] - created[n] for n in bound if n in created]
        if scenario == "gangs":
            for g in range(args.gangs):
                count = sum(1 for m in range(8) if f"g{g:04d}-{m}" in bound)
                if count == 8:
                    result.gangs_whole += 1
                elif count:
                    result.gangs_partial += 1
                else:
                    result.gangs_none += 1
    return result


def _write_timeline(
    path: Path, started: float, created: dict[str, float], bound: dict[str, float]
) -> None:
    """Each pod's creation and binding, seconds after the first creation (kept with the run's
    cluster state, for reading where the latency went)."""
    with path.open("w") as out:
        out.write("pod,created_s,bound_s\n")
        for name in sorted(created, key=created.__getitem__):
            when = bound.get(name)
            bound_s = f"{when - started:.3f}" if when is not None else ""
            out.write(f"{name},{created[name] - started:.3f},{bound_s}\n")


@contextmanager
def _scheduler_process(
    scheduler: str, state: Path, profile: Path | None = None, admitted: int = 0
) -> Iterator[tuple[int, ...]]:
    """The row's processes (their CPU is the row's): kube-scheduler's, aipaas's, or
    kube-scheduler's and Kueue's (Kueue admitting ``admitted`` pods at once)."""
    kube_scheduler = int((state / "run" / "kube-scheduler.pid").read_text())
    if scheduler == "kube-scheduler":
        yield (kube_scheduler,)
    elif scheduler == "kueue":
        with kueue(state, NAMESPACE, admitted) as pid:
            yield (kube_scheduler, pid)
    else:
        with aipaas_server(state, profile) as pid:
            yield (pid,)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=200)
    parser.add_argument("--gang-gpus", type=int, default=4, help="GPUs each gang member claims")
    parser.add_argument("--scenarios", default="single,openb,gangs")
    parser.add_argument(
        "--openb-data", type=Path, default=ROOT.parent / "shared" / "data" / "openb"
    )
    parser.add_argument(
        "--openb-nodes", type=int, help="every k-th openb node, this many (small trials)"
    )
    parser.add_argument("--openb-chunk", type=int, default=100, help="pods created at a time")
    parser.add_argument(
        "--openb-limit", type=float, default=600.0, help="seconds of openb replay at most"
    )
    parser.add_argument(
        "--schedulers",
        default="kube-scheduler,aipaas,kueue",
        help="kueue: kube-scheduler with Kueue in front (single and gangs only)",
    )
    parser.add_argument("--quiet", type=float, default=20.0, help="no binding this long: done")
    parser.add_argument("--limit", type=float, default=1800.0, help="seconds per run at most")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--profile", type=Path, help="sample aipaas's stacks into PROFILE.SCENARIO.txt"
    )
    parser.add_argument("--workdir", type=Path, help="keep each run's cluster state and logs here")
    args = parser.parse_args(argv)
    runs: list[Run] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kube-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        trace = None
        for scenario in args.scenarios.split(","):
            for scheduler in args.schedulers.split(","):
                if scenario == "openb" and scheduler == "kueue":
                    continue  # the openb rows compare placement; Kueue does not place
                if scenario == "openb":
                    trace = trace or load_trace(args.openb_data, most_nodes=args.openb_nodes)
                    run = run_openb(scheduler, trace, args, workdir)
                else:
                    run = run_scenario(scheduler, scenario, args, workdir)
                runs.append(run)
                print(table([run]).splitlines()[-1], flush=True)
    took = time.monotonic() - began
    text = table(runs) + "\n\n" + targets(runs)
    print()
    print(text)
    print(f"\nthe whole run took {took / 60:.1f} min")
    if args.out:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = "python benchmarks/kube_side_by_side.py " + " ".join(argv or sys.argv[1:])
        head = f"Measured {when}, `{command}` ({took / 60:.0f} min in all), single and gangs on "
        head += f"{args.nodes} KWOK nodes x {args.gpus} GPUs, openb on the trace's nodes:"
        args.out.write_text(
            args.out.read_text().split("\n<!-- table -->")[0]
            + f"\n<!-- table -->\n{head}\n\n{text}\n"
            if args.out.exists()
            else text + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
