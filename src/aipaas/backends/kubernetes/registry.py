"""Build the Kubernetes backend for ``make_backend`` (``--backend kubernetes``).

lightkube is an optional dependency (``pip install 'aipaas[kubernetes]'``), imported only
when this backend is asked for. Its fencing token is kept in the cluster (fencing.py), not in
a token file.
"""

from __future__ import annotations

import importlib.util

from aipaas.backends.base import Backend
from aipaas.backends.kubernetes.options import KubeOptions


def kube_backend(options: KubeOptions | None) -> Backend:
    if importlib.util.find_spec("lightkube") is None:
        raise ValueError(
            "the kubernetes backend needs lightkube (pip install 'aipaas[kubernetes]')"
        )
    from aipaas.backends.kubernetes.api import KubeApi
    from aipaas.backends.kubernetes.backend import KubernetesBackend

    options = options or KubeOptions()
    return KubernetesBackend(KubeApi.connect(options), options)
