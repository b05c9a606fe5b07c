#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue) from its Go module for benchmarks/kube_side_by_side.py's
# "kube-scheduler + Kueue" rows (issue 26). The go.mod that pins it is ours
# (deploy/kube-build/kueue/); no source is copied: the benchmark reads Kueue's CRDs and webhook
# manifests from the Go module cache. The binary is cached outside the repository by version and
# built only when absent (a cold build takes about 6 minutes on 2 cores). Prints the binary's
# path. Called only by the benchmark, not by scripts/test.sh: no test needs Kueue.
# With --print-module: the module's folder in the Go module cache (downloaded if absent).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
KUEUE_VERSION=v0.17.0
export GOFLAGS="-mod=mod -buildvcs=false"
if [ "${1:-}" = "--print-module" ]; then
  (cd "$here/deploy/kube-build/kueue" && go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  exit 0
fi
bin="${AIPAAS_KUEUE_BIN:-$HOME/.cache/aipaas/kube/kueue-$KUEUE_VERSION}"
mkdir -p "$bin"
if [ ! -x "$bin/kueue" ]; then
  echo "kueue_build: building kueue $KUEUE_VERSION" >&2
  (cd "$here/deploy/kube-build/kueue" \
    && go build -trimpath -ldflags "-s -w" -o "$bin/kueue.partial" sigs.k8s.io/kueue/cmd/kueue \
    && mv "$bin/kueue.partial" "$bin/kueue")
fi
echo "$bin/kueue"
