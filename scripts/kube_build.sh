#!/usr/bin/env bash
# Builds the real programs of the tests' throwaway Kubernetes control plane from their Go modules
# (issue 26): kube-apiserver, kube-scheduler and kubectl from k8s.io/kubernetes, etcd from
# go.etcd.io/etcd/server/v3 and kwok from sigs.k8s.io/kwok. The go.mod files that pin them are
# ours (deploy/kube-build/); no source is copied. Binaries are cached outside the repository by
# version and rebuilt only when absent. Prints the binary folder. Called by scripts/kube_cluster.sh
# and scripts/test.sh. With --print-dir: only the binary folder, nothing built.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
bin="${AIPAAS_KUBE_BIN:-$HOME/.cache/aipaas/kube/$KUBE_VERSION-etcd$ETCD_VERSION-kwok$KWOK_VERSION}"
if [ "${1:-}" = "--print-dir" ]; then  # where the binaries are (or will be): nothing built
  echo "$bin"
  exit 0
fi
mkdir -p "$bin"
export GOFLAGS="-mod=mod -buildvcs=false"
log() { echo "kube_build: $*" >&2; }
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
for program in kube-apiserver kube-scheduler kubectl; do
  if [ ! -x "$bin/$program" ]; then
    log "building $program $KUBE_VERSION (a cold build takes 10-20 minutes on 2 cores)"
    (cd "$here/deploy/kube-build/kubernetes" \
      && go build -trimpath -ldflags "$ldflags" -o "$bin/$program.partial" "k8s.io/kubernetes/cmd/$program" \
      && mv "$bin/$program.partial" "$bin/$program")
  fi
done
if [ ! -x "$bin/etcd" ]; then
  log "building etcd $ETCD_VERSION"
  (cd "$here/deploy/kube-build/etcd" \
    && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.partial" go.etcd.io/etcd/server/v3 \
    && mv "$bin/etcd.partial" "$bin/etcd")
fi
if [ ! -x "$bin/kwok" ]; then
  log "building kwok $KWOK_VERSION"
  tmp="$(mktemp -d)"
  GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$tmp/kwok" "$bin/kwok"
  rmdir "$tmp"
fi
echo "$bin"
