"""What the dataset tests of the Slurm and Ray backends share: the objects in S3, the Dataset
manifests, and a task that hashes what it reads at its dataset's path."""

from __future__ import annotations

import os

from tests.integration.s3_server import ACCESS_KEY, SECRET_KEY

BUCKET = "datasets"
OBJECTS = {f"train/part-{i}.bin": os.urandom((1 << 19) + i * 4099) for i in range(3)}
OBJECTS["train/nested/labels.txt"] = b"cat\ndog\n" * 1000
SIZE = sum(len(b) for b in OBJECTS.values())

#: the task: sha256 of the dataset's files in path order, written to OUT/<job>-<rank>
READER = """
import hashlib, os, pathlib
root = pathlib.Path(os.environ["AIPAAS_DATASET_TRAIN_PATH"])
digest = hashlib.sha256()
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    digest.update(path.read_bytes())
name = os.environ["AIPAAS_JOB"] + "-" + os.environ.get("RANK", "0")
pathlib.Path({out!r}, name).write_text(digest.hexdigest())
"""


def manifests(endpoint: str, tenant: str = "acme") -> str:
    """A Secret with the S3 keys, Dataset ``train`` (s3://datasets/train) and Dataset
    ``labels`` (its nested directory only)."""
    return f"""apiVersion: aipaas/v1
kind: Secret
metadata: {{name: s3-creds, tenant: {tenant}}}
spec:
  data: {{accessKeyId: {ACCESS_KEY}, secretAccessKey: {SECRET_KEY}}}
---
apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: train, tenant: {tenant}}}
spec:
  source: s3://{BUCKET}/train
  endpoint: {endpoint}
  secretRef: s3-creds
  cache: {{replicas: 1}}
---
apiVersion: aipaas/v1
kind: Dataset
metadata: {{name: labels, tenant: {tenant}}}
spec:
  source: s3://{BUCKET}/train/nested
  endpoint: {endpoint}
  secretRef: s3-creds
  cache: {{replicas: 1}}
"""
