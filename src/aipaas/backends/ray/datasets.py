"""The Ray backend's dataset caches: one per Ray node (backends/node_datasets.py).

Server side (no ray import here): a task with datasets starts as the stage, then its command
(``stage_actor``); the files the stage reads (its sources and credentials, its command) travel
in the actor's spec under ``NODE_FILES`` and the actor writes them on its node, mode 0600,
before it starts the command (``write_node_files``; the variable never reaches the task). A
background load runs the copier on the node as a Ray task (``datasets_driver.py``, in the
driver process). Tasks run as the Ray workers' user, as every Ray task does: Ray itself
separates no tenants on a node.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from aipaas.backends.base import LaunchRequest
from aipaas.backends.node_datasets import NodeDatasetCaches
from aipaas.data.entry import Entry

NODE_FILES = "AIPAAS_NODE_FILES"
#: driver.py's DEFAULT_TASK_ROOT (not imported: that module imports ray)
TASK_ROOT = "/tmp/aipaas-ray-tasks"


class RayDatasetCaches(NodeDatasetCaches):
    """Mixed into RayBackend: ``_call`` reaches its driver process, ``_options`` its options."""

    _options: dict[str, Any]

    def _call(self, method: str, *args: Any) -> Any:
        raise NotImplementedError

    def stage_actor(self, request: LaunchRequest) -> LaunchRequest:
        """The request whose actor stages its datasets first, in the task's directory on its
        node (``<task root>/<request id>``, named for its leases); others as they are."""
        task_root = str(getattr(self, "_options", {}).get("task_root") or TASK_ROOT)
        directory = Path(task_root) / request.request_id
        staged, files = self.staged(request, directory, request.working_dir or str(directory))
        if not files:
            return staged
        return replace(staged, env={**staged.env, NODE_FILES: json.dumps(files)})

    def _start_load(self, node: str, entry: Entry) -> None:
        self._call("load_on_node", node, str(entry.path))


def write_node_files(text: str) -> None:
    """The actor's side: each file of ``NODE_FILES`` written (mode 0600, its directory the
    task's alone) before the command starts."""
    files: dict[str, str] = json.loads(text)
    for path, content in files.items():
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        temporary = f"{path}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(content)
        os.replace(temporary, path)
