#!/usr/bin/env bash
# A throwaway Ray cluster on this host, to try `aipaas server --backend ray`: a head node (no
# GPUs) and N worker nodes with fake GPUs (Ray only counts them; CUDA_VISIBLE_DEVICES names
# Ray's ids). Uses the ray of .venv (scripts/setup.sh installs it: the `ray` extra).
#
#   bash scripts/ray_cluster.sh start [NODES] [GPUS_PER_NODE]   # default 2 nodes x 4 GPUs
#   .venv/bin/aipaas server --backend ray --ray-address "$(cat /tmp/aipaas-ray/address)"
#   bash scripts/ray_cluster.sh stop
#
# The cluster keeps its sessions under $STATE/ray (Ray's --temp-dir): stop ends only the
# processes whose command line names that directory, and their descendants (the workers), so
# other Ray clusters of this host are left alone (`ray stop` would end every one of them).
# The Ray backend's tests do not use this script: tests/integration/ray_cluster.py starts its
# own cluster with Ray's cluster utilities (which can also remove a node, as a failure would);
# tests/integration/test_first_hour.py checks that stop leaves other Ray processes running.
set -euo pipefail
cd "$(dirname "$0")/.."
RAY=.venv/bin/ray
STATE=${AIPAAS_RAY_STATE:-/tmp/aipaas-ray}
command=${1:-}
nodes=${2:-2}
gpus=${3:-4}
export RAY_USAGE_STATS_ENABLED=0

case "$command" in
start)
  [ -x "$RAY" ] || { echo "no $RAY: run scripts/setup.sh (installs the ray extra)" >&2; exit 1; }
  mkdir -p "$STATE"
  STATE=$(cd "$STATE" && pwd)  # Ray wants an absolute --temp-dir
  port=${AIPAAS_RAY_PORT:-6380}
  "$RAY" start --head --port "$port" --num-cpus 1 --num-gpus 0 --include-dashboard false \
    --temp-dir "$STATE/ray" --disable-usage-stats >"$STATE/head.log" 2>&1 \
    || { cat "$STATE/head.log" >&2; exit 1; }
  address="127.0.0.1:$port"
  if grep -q "ray start --address='" "$STATE/head.log"; then
    address=$(grep -o "ray start --address='[^']*'" "$STATE/head.log" | head -1 | cut -d"'" -f2)
  fi
  for i in $(seq 1 "$nodes"); do
    "$RAY" start --address "$address" --num-cpus 4 --num-gpus "$gpus" \
      --resources '{"accelerator_type:H100": 1}' >"$STATE/node-$i.log" 2>&1 \
      || { cat "$STATE/node-$i.log" >&2; exit 1; }
  done
  echo "$address" >"$STATE/address"
  echo "Ray cluster at $address: head + $nodes node(s) x $gpus fake GPU(s)"
  echo "  .venv/bin/aipaas server --backend ray --ray-address $address"
  ;;
stop)
  [ -d "$STATE" ] || { echo "no Ray cluster of this script at $STATE"; exit 0; }
  STATE=$(cd "$STATE" && pwd)
  # This cluster's processes: those naming its session directory, then their descendants.
  mine() {
    local found="" pid
    for pid in $(pgrep -f -- "$STATE/ray/" || true); do
      [ "$pid" != "$$" ] && found="$found $pid"
    done
    local frontier=$found
    while [ -n "${frontier// /}" ]; do
      local next=""
      for pid in $frontier; do
        next="$next $(pgrep -P "$pid" || true)"
      done
      frontier=$next
      found="$found $next"
    done
    echo $found
  }
  pids=$(mine)
  [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    [ -z "$(mine)" ] && break
    sleep 0.2
  done
  left=$(mine)
  [ -n "$left" ] && kill -KILL $left 2>/dev/null || true
  rm -f "$STATE/address"
  echo "Ray cluster of $STATE stopped"
  ;;
*)
  echo "usage: $0 start [NODES] [GPUS_PER_NODE] | stop" >&2
  exit 2
  ;;
esac
