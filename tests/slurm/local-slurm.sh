#!/usr/bin/env bash
# A private one-node Slurm cluster on localhost for the Slurm launcher's tests (tests/slurm/test_slurm_launcher.py).
#
#   tests/slurm/local-slurm.sh start DIR   # kills daemons an earlier start in DIR left, starts munged, slurmctld and
#                                          # slurmd with state, logs, ports and the munge socket/key all under DIR,
#                                          # and waits until the node is idle
#   tests/slurm/local-slurm.sh stop DIR    # cancels its jobs and stops its daemons
#   tests/slurm/local-slurm.sh env DIR     # prints `export SLURM_CONF=DIR/slurm.conf`: sbatch/squeue then talk to it
#
# Everything is private to DIR (its own munge key and socket, ports picked free at start), so it runs beside a real
# cluster's configuration and beside other test clusters. It needs root (slurmd runs jobs as their user) and the
# Debian packages slurmctld, slurmd, slurm-client and munge (scripts/install-deps.sh installs them). The node
# declares 8 CPUs whatever the machine has (SlurmdParameters=config_overrides): the tests' runs are tiny, and
# several array tasks at once on 2 cores is what they need to finish in time. cred_expire=5: a requeued job waits
# cred_expire + 1 seconds before it may start again (Slurm's default is 120).
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|env DIR" >&2
  exit 2
}
(($# == 2)) || usage
action=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
conf=$dir/slurm.conf
node=$(hostname -s)

# The daemons this script started in DIR, by the pid files they wrote there; a pid is only killed while its
# command line still names the daemon (a stale pid file may point at an unrelated process by now).
stop_daemons() {
  local name pidfile pid
  for name in slurmd slurmctld munged; do
    pidfile=$dir/$name.pid
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$name"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

require() {  # command, Debian package
  command -v "$1" >/dev/null 2>&1 ||
    { echo "error: $1 not found: install the Debian package $2 (scripts/install-deps.sh does)" >&2; exit 1; }
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

case $action in
env)
  echo "export SLURM_CONF=$conf"
  ;;
stop)
  if [[ -f $conf ]] && command -v scancel >/dev/null 2>&1; then
    SLURM_CONF=$conf timeout 10 scancel --user="$(id -un)" 2>/dev/null || true
  fi
  stop_daemons
  ;;
start)
  require munged munge
  require slurmctld slurmctld
  require slurmd slurmd
  for tool in sbatch squeue scontrol scancel sinfo; do require "$tool" slurm-client; done
  [[ $(id -u) -eq 0 ]] || { echo "error: the local Slurm cluster needs root (slurmd starts jobs as their user)" >&2; exit 1; }
  stop_daemons
  rm -rf "$dir/state" "$dir/spool" "$dir/log"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"
  if [[ ! -s $dir/munge/munge.key ]]; then
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 600 "$dir/munge/munge.key"
  munged --force -S "$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" --log-file="$dir/log/munged.log" \
    --pid-file="$dir/munged.pid" --seed-file="$dir/munge/munged.seed"
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done
  cat >"$conf" <<EOF
# Written by tests/slurm/local-slurm.sh: a private one-node cluster for tests.
ClusterName=canonlab-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerParameters=sched_interval=1
KillWait=10
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$conf
  slurmctld -i || { echo "error: slurmctld did not start; see $dir/log/slurmctld.log" >&2; tail -20 "$dir/log/slurmctld.log" >&2; exit 1; }
  slurmd -N "$node" || { echo "error: slurmd did not start; see $dir/log/slurmd.log" >&2; tail -20 "$dir/log/slurmd.log" >&2; exit 1; }
  for _ in $(seq 300); do
    state=$(sinfo --noheader --nodes="$node" --format=%t 2>/dev/null || true)
    if [[ $state == idle ]]; then
      echo "local Slurm cluster up in $dir (node $node idle, slurmctld port $ctld_port); $(basename "$0") env $dir"
      exit 0
    fi
    sleep 0.1
  done
  echo "error: the node did not become idle within 30 s (sinfo: '${state:-no answer}'); logs in $dir/log:" >&2
  tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
  stop_daemons
  exit 1
  ;;
*)
  usage
  ;;
esac
