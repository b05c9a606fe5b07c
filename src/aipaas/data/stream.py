"""A task that reads its dataset from the source: the cache policy's ``streaming``.

When the node's cache does not hold the whole dataset as a task starts and its Dataset's policy
allows streaming, the stage (data/stage.py) does not wait for the copy: the task gets the
source's fsspec URL and options instead of a path (``AIPAAS_DATASET_<NAME>_URL`` and
``..._STORAGE_OPTIONS``, JSON for ``fsspec.open``/``url_to_fs``; ``..._PATH`` is not set).
The options carry the tenant's own credentials to the tenant's own task, as the copier uses
them. A file:// source is never streamed (a task reads no path of the node's it was not given).
Filling the cache is the prefetch's and ``aipaas dataset warm``'s job.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aipaas.data.copier import cached
from aipaas.data.entry import Entry, write_atomic
from aipaas.data.source import HOST_PROTOCOLS, SourceSpec, check_host, storage_options

LAUNCH_FILE = "launch.json"


def stream_variables(
    item: Mapping[str, Any], entry: Entry, source: SourceSpec
) -> dict[str, str | None] | None:
    """The task's variables to read ``source`` itself (None for a variable removed), or None
    when the cache serves it: streaming not allowed, the entry complete, a file:// source."""
    if not item.get("stream") or source.protocol == "file":
        return None
    if cached(entry, source) is not None:
        return None
    check_host(source.endpoint or "")
    if source.protocol in HOST_PROTOCOLS:
        check_host(source.url)
    variable = str(item["variable"])
    prefix = variable.removesuffix("_PATH")
    return {
        variable: None,
        prefix + "_URL": source.url,
        prefix + "_STORAGE_OPTIONS": json.dumps(storage_options(source)),
    }


def set_task_variables(directory: Path, changes: Mapping[str, str | None]) -> None:
    """Into the environment the task starts with: this process's (a runner that inherits it)
    and DIR/launch.json's ``env`` where the runner takes its environment from there."""
    for key, value in changes.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    launch_file = directory / LAUNCH_FILE
    try:
        launch = json.loads(launch_file.read_text())
    except FileNotFoundError:
        return
    if isinstance(launch.get("env"), dict):
        env = {k: v for k, v in launch["env"].items() if changes.get(k, "") is not None}
        env.update({k: v for k, v in changes.items() if v is not None})
        launch["env"] = env
        write_atomic(launch_file, json.dumps(launch), private=True)
