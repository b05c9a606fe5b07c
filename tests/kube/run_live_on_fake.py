"""Run the live Kubernetes test (test_kube_live.py) against the fake API server, with a fake
kubelet that runs every bound pod to success (its log: "rank R of N"). A check of the live
test's own code where no cluster can be reached:

    .venv/bin/python tests/kube/run_live_on_fake.py [DEVICE_CLASS]
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest
from kube_fake import FakeKube
from kube_objects import gpu_node, gpu_slice


def kubelet(fake: FakeKube, stop: threading.Event) -> None:
    while not stop.is_set():
        for pod in fake.list("Pod"):
            meta = pod["metadata"]
            if pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") == "Pending":
                env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])}
                line = f"rank {env.get('RANK')} of {env.get('WORLD_SIZE')}\n"
                fake.logs[(meta["namespace"], meta["name"])] = line
                fake.set_pod_phase(meta["namespace"], meta["name"], "Succeeded", 0)
        time.sleep(0.2)


def main() -> int:
    with FakeKube() as fake, tempfile.TemporaryDirectory() as tmp:
        for node in ("gpu-a", "gpu-b"):
            fake.put(gpu_node(node))
            fake.put(gpu_slice(node, 4))
        os.environ["AIPAAS_KUBECONFIG"] = str(fake.write_kubeconfig(Path(tmp) / "kubeconfig"))
        if len(sys.argv) > 1:
            os.environ["AIPAAS_KUBE_DEVICE_CLASS"] = sys.argv[1]
        stop = threading.Event()
        threading.Thread(target=kubelet, args=(fake, stop), daemon=True).start()
        here = Path(__file__).parent
        code = pytest.main(["-q", "-p", "no:cacheprovider", str(here / "test_kube_live.py")])
        stop.set()
        if fake.rejected:
            print("objects the schemas refused:", fake.rejected)
            return 1
        return int(code)


if __name__ == "__main__":
    sys.exit(main())
