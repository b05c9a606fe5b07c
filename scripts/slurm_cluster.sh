#!/usr/bin/env bash
# A throwaway single-host Slurm cluster for trying aipaas's Slurm backend and for its tests.
#
#   scripts/slurm_cluster.sh start DIR [NODES] [GPUS] [accounting]   # prints SLURM_CONF=DIR/slurm.conf
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
#
# With "accounting" (apt-get install slurmdbd mariadb-server): a MariaDB server of its own
# (datadir, socket and a free TCP port in DIR; the packaged service is not used) and slurmdbd
# (AccountingStorageType=accounting_storage/slurmdbd), so that sacct answers: when Slurm really
# started and ended each job. About 5 s more to start.
set -euo pipefail

usage() { echo "usage: $0 start DIR [NODES] [GPUS] [accounting] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m "$2")

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
  for pidfile in "$dir"/run/slurmd-*.pid "$dir"/run/slurmctld.pid "$dir"/run/slurmdbd.pid \
    "$dir"/run/mariadbd.pid "$dir"/run/munged.pid; do
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

# accounting: MariaDB and slurmdbd, both throwaway daemons in DIR; sets dbd_port
start_accounting() {
  local user=$1 host=$2 db_port
  for tool in mariadb-install-db mariadbd mariadb slurmdbd sacctmgr; do
    command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install slurmdbd mariadb-server" >&2; exit 3; }
  done
  rm -rf "$dir/mysql"
  mkdir -p "$dir/mysql"
  db_port=$(free_port)
  # root reaches it over its socket only (unix_socket authentication for the OS user running
  # this); slurmdbd over TCP as the user "slurm" created below
  mariadb-install-db --no-defaults --datadir="$dir/mysql/data" --user="$user" \
    --auth-root-authentication-method=socket --auth-root-socket-user="$user" \
    --skip-test-db >"$dir/log/mariadb-install.log" 2>&1
  mariadbd --no-defaults --datadir="$dir/mysql/data" --user="$user" \
    --socket="$dir/mysql/mysql.sock" --bind-address=127.0.0.1 --port="$db_port" \
    --pid-file="$dir/run/mariadbd.pid" --log-error="$dir/log/mariadbd.log" \
    --skip-name-resolve --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
    --innodb-flush-log-at-trx-commit=0 >/dev/null 2>&1 &
  for _ in $(seq 150); do
    mariadb --no-defaults -S "$dir/mysql/mysql.sock" -e "SELECT 1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  mariadb --no-defaults -S "$dir/mysql/mysql.sock" -e \
    "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'aipaas'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  dbd_port=$(free_port)
  {
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$dir/munge/munge.sock"
    echo "DbdHost=$host"
    echo "DbdAddr=127.0.0.1"
    echo "DbdPort=$dbd_port"
    echo "SlurmUser=$user"
    echo "PidFile=$dir/run/slurmdbd.pid"
    echo "LogFile=$dir/log/slurmdbd.log"
    echo "StorageType=accounting_storage/mysql"
    echo "StorageHost=127.0.0.1"
    echo "StoragePort=$db_port"
    echo "StorageUser=slurm"
    echo "StoragePass=aipaas"
    echo "StorageLoc=slurm_acct_db"
  } >"$dir/slurmdbd.conf"
  chmod 600 "$dir/slurmdbd.conf"  # slurmdbd refuses a readable one (it holds the password)
}

# slurmdbd reads slurmdbd.conf beside $SLURM_CONF; the cluster is registered before slurmctld
start_slurmdbd() {
  slurmdbd
  for _ in $(seq 50); do
    timeout 5 sacctmgr -i add cluster aipaas >/dev/null 2>&1 && return 0
    timeout 5 sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw aipaas && return 0
    sleep 0.2
  done
  echo "slurmdbd did not answer:" >&2
  tail -n 20 "$dir"/log/slurmdbd.log "$dir"/log/mariadbd.log >&2 || true
  exit 1
}

start() {
  local nodes=${1:-2} gpus=${2:-4} accounting=${3:-}
  [ -z "$accounting" ] || [ "$accounting" = accounting ] || usage
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
  local cpus mem dbd_port=""
  [ -z "$accounting" ] || start_accounting "$user" "$host"
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
    if [ -n "$dbd_port" ]; then
      echo "AccountingStorageType=accounting_storage/slurmdbd"
      echo "AccountingStorageHost=127.0.0.1"
      echo "AccountingStoragePort=$dbd_port"
      echo "AccountingStoragePass=$dir/munge/munge.sock"  # munge's socket, for slurmdbd
    else
      echo "AccountingStorageType=accounting_storage/none"
    fi
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
  [ -z "$dbd_port" ] || start_slurmdbd
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
