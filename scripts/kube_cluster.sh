#!/usr/bin/env bash
# A throwaway Kubernetes control plane on loopback, for trying aipaas's Kubernetes backend, for
# its tests and for benchmarks/kube_side_by_side.py (issue 26).
#
#   scripts/kube_cluster.sh start [DIR] [--scheduler] [--kwok] [--audit]   # prints KUBECONFIG=...
#   scripts/kube_cluster.sh env [DIR]                                      # prints the kubeconfig path
#   scripts/kube_cluster.sh stop [DIR]
#
# DIR (default $AIPAAS_KUBE_STATE or /tmp/aipaas-kube) holds everything: the certificates and
# keys made here with openssl (a CA, the API server's serving certificate for 127.0.0.1 and
# localhost, client certificates, a service-account signing key), kubeconfigs, etcd's data,
# logs and pid files. The binaries come from scripts/kube_build.sh (built once, cached by
# version outside the repository).
#
# Started: etcd 3.6 and kube-apiserver 1.37 (RBAC; resource.k8s.io/v1 served: DRA is GA and on
# by default). No controller manager runs, so two admission plugins are off: ServiceAccount
# (nothing makes each namespace's default service account) and TaintNodesByCondition (only the
# node lifecycle controller would lift its not-ready taint); namespaces are not emptied on
# delete and ResourceClaimTemplates are not turned into claims. PodTemplates (which nothing here
# uses) are served without the watch cache, straight from etcd, so that a test can watch from a
# version etcd compacted and get 410 Gone. With --scheduler, kube-scheduler (its own identity,
# system:kube-scheduler, and the default profile). With --kwok, the kwok controller playing the
# kubelet of the nodes annotated kwok.x-k8s.io/node=fake, with the stages in
# deploy/kube-build/kwok-stages.yaml (a node turns Ready, a bound pod runs, a pod labelled
# kwok-complete=true succeeds, a deleted pod ends and goes). With --audit, every request is
# written to DIR/audit.log (who, verb, resource; a binding's body), which the tests and the
# side-by-side benchmark read.
#
# Identities (client certificates, each with a kubeconfig in DIR): admin.kubeconfig
# (system:masters), aipaas.kubeconfig (user "aipaas", bound to deploy/kubernetes/rbac.yaml's
# ClusterRole by the tests that use it), scheduler.kubeconfig, kwok.kubeconfig.
# Stop kills only the processes whose pid files are in DIR.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

usage() {
  echo "usage: $0 start [DIR] [--scheduler] [--kwok] [--audit] | env [DIR] | stop [DIR]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
action=$1
shift
dir=${AIPAAS_KUBE_STATE:-/tmp/aipaas-kube}
if [ $# -ge 1 ] && [ "${1#--}" = "$1" ]; then
  dir=$1
  shift
fi
dir=$(realpath -m "$dir")

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
  for name in kwok kube-scheduler kube-apiserver etcd; do
    pidfile="$dir/run/$name.pid"
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

# a key and a certificate signed by the CA: NAME CN [O] [SAN]
certificate() {
  local name=$1 cn=$2 org=${3:-} san=${4:-} subject
  subject="/CN=$cn"
  [ -z "$org" ] || subject="/O=$org$subject"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/pki/$name.key" -out "$dir/pki/$name.csr" -subj "$subject" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then
      echo "extendedKeyUsage=serverAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$dir/pki/$name.ext"
  openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 30 -extfile "$dir/pki/$name.ext" -out "$dir/pki/$name.crt" 2>/dev/null
  rm -f "$dir/pki/$name.csr" "$dir/pki/$name.ext"
}

# a kubeconfig for the client certificate NAME
kubeconfig() {
  local name=$1 server=$2
  cat >"$dir/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: aipaas-test
  cluster:
    server: $server
    certificate-authority: $dir/pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $dir/pki/$name.crt
    client-key: $dir/pki/$name.key
contexts:
- name: $name
  context: {cluster: aipaas-test, user: $name}
current-context: $name
EOF
}

wait_for() {  # what, seconds, command...: until the command succeeds or the process ends
  local what=$1 seconds=$2 pid
  shift 2
  pid=$(cat "$dir/run/$what.pid")
  for _ in $(seq $((seconds * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$what did not start; its log:" >&2
  tail -n 30 "$dir/log/$what.log" >&2 || true
  stop
  exit 1
}

start() {
  local scheduler="" kwok="" audit=""
  for option in "$@"; do
    case "$option" in
      --scheduler) scheduler=1 ;;
      --kwok) kwok=1 ;;
      --audit) audit=1 ;;
      *) usage ;;
    esac
  done
  command -v openssl >/dev/null || { echo "openssl not found: apt-get install openssl" >&2; exit 3; }
  local bin
  # AIPAAS_KUBE_PREBUILT: a folder of binaries to use as they are (nothing is built)
  bin=${AIPAAS_KUBE_PREBUILT:-$(bash "$here/scripts/kube_build.sh")}
  stop
  rm -rf "$dir/etcd" "$dir/pki" "$dir/log"
  mkdir -p "$dir/run" "$dir/log" "$dir/pki" "$dir/etcd"
  chmod 700 "$dir/etcd" "$dir/pki"

  # certificates, as envtest makes them: a CA of our own, a serving certificate, clients
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" -days 30 -subj "/CN=aipaas-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  certificate serving kube-apiserver "" "IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc"
  certificate admin admin system:masters
  certificate aipaas aipaas
  certificate scheduler system:kube-scheduler
  certificate kwok kwok system:masters
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null

  local etcd_port peer_port api_port server
  etcd_port=$(free_port)
  peer_port=$(free_port)
  api_port=$(free_port)
  server="https://127.0.0.1:$api_port"
  for name in admin aipaas scheduler kwok; do kubeconfig "$name" "$server"; done

  # etcd: no fsync (a throwaway store; a test cluster's writes need not survive power loss)
  "$bin/etcd" --name default --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "default=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync --log-level warn >"$dir/log/etcd.log" 2>&1 &
  echo $! >"$dir/run/etcd.pid"
  wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

  local audit_flags=()
  if [ -n "$audit" ]; then
    cat >"$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request  # a binding's body: where the scheduler put the pod
  resources: [{group: "", resources: [pods/binding]}]
- level: Metadata
EOF
    audit_flags=(--audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log"
      --audit-log-format json --audit-log-mode batch --audit-log-batch-max-wait 1s)
  fi
  "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --endpoint-reconciler-type none \
    --cert-dir "$dir/pki" \
    --tls-cert-file "$dir/pki/serving.crt" --tls-private-key-file "$dir/pki/serving.key" \
    --client-ca-file "$dir/pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 \
    --authorization-mode RBAC \
    --disable-admission-plugins ServiceAccount,TaintNodesByCondition \
    --allow-privileged=true \
    --max-requests-inflight 1000 --max-mutating-requests-inflight 500 \
    --watch-cache-sizes podtemplates#0 \
    "${audit_flags[@]}" >"$dir/log/kube-apiserver.log" 2>&1 &
  echo $! >"$dir/run/kube-apiserver.pid"
  local as_admin=(curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key")
  # ready once every post-start hook ran (RBAC's bootstrap roles among them)
  wait_for kube-apiserver 90 "${as_admin[@]}" "$server/readyz"

  if [ -n "$scheduler" ]; then
    "$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
      --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
      --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
      --leader-elect=false --secure-port 0 \
      --kube-api-qps 1000 --kube-api-burst 1000 >"$dir/log/kube-scheduler.log" 2>&1 &
    echo $! >"$dir/run/kube-scheduler.pid"
  fi
  if [ -n "$kwok" ]; then
    "$bin/kwok" --kubeconfig "$dir/kwok.kubeconfig" \
      --config "$here/deploy/kube-build/kwok-stages.yaml" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
      --cidr 10.0.0.1/16 --node-ip 10.0.0.1 \
      --server-address "" >"$dir/log/kwok.log" 2>&1 &
    echo $! >"$dir/run/kwok.pid"
  fi
  sleep 0.5
  for name in kube-scheduler kwok; do
    if [ -f "$dir/run/$name.pid" ] && ! kill -0 "$(cat "$dir/run/$name.pid")" 2>/dev/null; then
      echo "$name exited; its log:" >&2
      tail -n 30 "$dir/log/$name.log" >&2
      stop
      exit 1
    fi
  done
  echo "$server" >"$dir/server"
  echo "http://127.0.0.1:$etcd_port" >"$dir/etcd-url"
  echo "$bin" >"$dir/bin"
  echo "KUBECONFIG=$dir/admin.kubeconfig"
}

case "$action" in
  start) start "$@" ;;
  stop) stop ;;
  env)
    [ -f "$dir/admin.kubeconfig" ] || { echo "no cluster in $dir: start one first" >&2; exit 1; }
    echo "$dir/admin.kubeconfig"
    ;;
  *) usage ;;
esac
