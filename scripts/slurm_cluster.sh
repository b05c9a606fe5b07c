#!/usr/bin/env bash
# A throwaway single-host Slurm cluster for trying aipaas's Slurm backend and for its tests.
#
#   scripts/slurm_cluster.sh start DIR [NODES] [GPUS]   # prints SLURM_CONF=DIR/slurm.conf
#   scripts/slurm_cluster.sh stop DIR
#
# Debian's slurm-wlm and munge (apt-get install slurm-wlm munge, as root). Everything lives in
# DIR: its own munge key and socket (no system munged is touched), slurm.conf, gres.conf,
# spool directories, logs and pid files. NODES node names (default 2: n1, n2) all run on this
# host, one slurmd each (slurmd -N NAME, each on its own port); each node declares GPUS fake
# GPUs (default 4) as GRES: device files that are links to /dev/null, AutoDetect=off (without
# File= lines, or with autodetection, a node with GPUs drains at registration). No cgroups,
# no accounting daemon: status comes from slurmctld (squeue/scontrol), which keeps a finished
# job for MinJobAge seconds. Stop kills only the daemons whose pid files are in DIR.
set -euo pipefail

usage() { echo "usage: $0 start DIR [NODES] [GPUS] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m "$2")

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
  for pidfile in "$dir"/run/slurmd-*.pid "$dir"/run/slurmctld.pid "$dir"/run/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

start() {
  local nodes=${1:-2} gpus=${2:-4}
  for tool in munged slurmctld slurmd sbatch; do
    command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install slurm-wlm munge" >&2; exit 3; }
  done
  stop
  rm -rf "$dir/spool" "$dir/state" "$dir/dev"
  mkdir -p "$dir/run" "$dir/log" "$dir/spool" "$dir/state" "$dir/dev" "$dir/munge"
  chmod 700 "$dir/munge"
  # munge: a key of our own, a socket in DIR
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munge.seed"
  local user host ctl_port names="" gres_lines=""
  user=$(id -un)
  host=$(hostname -s)
  ctl_port=$(free_port)
  local cpus mem
  cpus=$(nproc)
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 / nodes))
  {
    echo "ClusterName=aipaas"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$ctl_port"
    echo "SlurmUser=$user"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$dir/munge/munge.sock"
    echo "CredType=cred/munge"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
    echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core_Memory"
    echo "GresTypes=gpu"
    echo "ReturnToService=2"
    echo "MinJobAge=600"
    echo "KillWait=2"
    echo "SchedulerParameters=sched_interval=1"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "MpiDefault=none"
    echo "LaunchParameters=use_interactive_step"
    for i in $(seq "$nodes"); do
      local name="n$i" port
      port=$(free_port)
      names="$names${names:+,}$name"
      mkdir -p "$dir/spool/$name" "$dir/dev/$name"
      for g in $(seq 0 $((gpus - 1))); do ln -sf /dev/null "$dir/dev/$name/nvidia$g"; done
      local gres=""
      [ "$gpus" -gt 0 ] && gres="Gres=gpu:a100:$gpus"
      echo "NodeName=$name NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=$cpus RealMemory=$mem $gres Feature=rack$(( (i + 1) / 2 )) State=UNKNOWN"
      if [ "$gpus" -gt 0 ]; then
        gres_lines="$gres_lines
NodeName=$name Name=gpu Type=a100 File=$dir/dev/$name/nvidia[0-$((gpus - 1))]"
      fi
    done
    echo "PartitionName=main Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$dir/slurm.conf"
  { echo "AutoDetect=off"; echo "$gres_lines"; } >"$dir/gres.conf"
  # Debian's plugstack.conf lives in /etc/slurm; ours is empty
  : >"$dir/plugstack.conf"
  echo "PlugStackConfig=$dir/plugstack.conf" >>"$dir/slurm.conf"
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -i -f "$SLURM_CONF"
  for name in ${names//,/ }; do
    slurmd -N "$name" -f "$SLURM_CONF"
  done
  # ready when every node is idle (about 3 s)
  for _ in $(seq 150); do
    if [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)" -ge "$nodes" ]; then
      echo "SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.2
  done
  echo "the cluster did not become idle; sinfo says:" >&2
  sinfo -N -l >&2 || true
  tail -n 20 "$dir"/log/*.log >&2 || true
  exit 1
}

case "$action" in
  start) shift 2; start "$@" ;;
  stop) stop ;;
  *) usage ;;
esac
