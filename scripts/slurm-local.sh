#!/usr/bin/env bash
# A real single-node SLURM (munged + slurmctld + slurmd) on this machine, so `srun -n 25 python
# -m ingest` is tested under the launcher the cluster uses, not only under mpiexec.
#
#   bash scripts/slurm-local.sh start    install if needed (apt), start, wait until the node is idle
#   bash scripts/slurm-local.sh stop     stop what `start` started (by pid file)
#   bash scripts/slurm-local.sh status   sinfo
#   bash scripts/slurm-local.sh env      print `export SLURM_CONF=...` for this setup
#
# Facts from ../shared/INFRA.md: no systemd here, so the daemons are started by hand; munged
# runs as user munge; the node declares CPUs=32 (config_overrides) so 25 tasks fit on 2 real
# cores; MpiDefault=pmix, because `--mpi=none` gives every rank its own silent size-1 world,
# and the pmix plugin needs libpmix-dev (it dlopens the unversioned libpmix.so).
# Everything (config, state, spool, logs, pid files) lives under $INGEST_SLURM_DIR.
set -euo pipefail

dir=${INGEST_SLURM_DIR:-${TMPDIR:-/tmp}/ingest-slurm}
conf=$dir/etc/slurm.conf
ctld_port=${INGEST_SLURM_CTLD_PORT:-6817}
slurmd_port=${INGEST_SLURM_SLURMD_PORT:-6818}
munged_pidfile=/run/munge/munged.pid
ready_timeout_s=${INGEST_SLURM_READY_TIMEOUT_S:-60}
export SLURM_CONF=$conf
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

log() { echo "slurm-local: $*" >&2; }

alive() {  # alive PIDFILE: the process named in PIDFILE is running
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
  local missing=()
  for pkg in munge slurmctld slurmd slurm-client libpmix-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} (one-off, ~15 s)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    return  # a munged is already serving (ours from an earlier start, or the system's)
  fi
  [ -s /etc/munge/munge.key ] || $SUDO runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
  $SUDO install -d -o munge -g munge -m 0755 /run/munge
  # munged writes its pid file as user munge, so it goes in munge's own /run/munge.
  $SUDO runuser -u munge -- /usr/sbin/munged --pid-file="$munged_pidfile"
  touch "$dir/run/munged.ours"
  for _ in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return
    sleep 0.1
  done
  log "munged did not start; see journal or /var/log/munge/munged.log"; exit 1
}

write_conf() {
  local host; host=$(hostname -s)
  # slurmctld only runs where SlurmctldHost names this machine; slurmd is told its node name (-N).
  cat >"$conf" <<EOF
# Written by scripts/slurm-local.sh: one node on loopback, for tests and the demo.
ClusterName=ingest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups here: track processes by parent pid, bind nothing (more tasks than cores).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Trust the CPUs below over the 2 cores slurmd counts, so 25-rank jobs fit.
SlurmdParameters=config_overrides
MpiDefault=pmix
EnforcePartLimits=ALL
ReturnToService=2
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
SlurmdTimeout=60
# sbatch --wait polls after 2 s, then 8 s, then 32 s, unless MinJobAge/2 <= 2 s keeps it at
# 2 s: a 3 s test job then returns in ~4 s instead of 10 s, a 15 s one in ~16 s instead of
# 42 s. A finished job stays visible MinJobAge..MinJobAge+60 s (purges run once a minute),
# which still outlasts a 2 s poll.
MinJobAge=4
InactiveLimit=0
KillWait=5
NodeName=localnode NodeAddr=127.0.0.1 NodeHostname=$host CPUs=32 State=UNKNOWN
PartitionName=local Nodes=localnode Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  # The pmix plugin's per-step client directories default to /tmp/spmix_appdir_<uid>_<job>.<step>;
  # job ids restart at 1 with every fresh cluster, so one left by a killed step makes that step
  # fail to launch in every later cluster ("File exists"). Keep them in this cluster's directory.
  mkdir -p "$dir/pmix"
  echo "PMIxCliTmpDirBase=$dir/pmix" >"$(dirname "$conf")/mpi.conf"
  # Let a plain `sbatch` (no SLURM_CONF) find it, unless the machine has a slurm.conf of its own.
  if [ ! -e /etc/slurm/slurm.conf ] || [ "$(readlink /etc/slurm/slurm.conf)" = "$conf" ]; then
    $SUDO mkdir -p /etc/slurm && $SUDO ln -sfn "$conf" /etc/slurm/slurm.conf && touch "$dir/run/link.ours"
  fi
}

wait_idle() {
  local t0=$SECONDS state=""
  while [ $((SECONDS - t0)) -lt "$ready_timeout_s" ]; do
    state=$(sinfo -h -N -n localnode -o %T 2>/dev/null || true)
    [ "$state" = idle ] && return
    sleep 0.2
  done
  log "node not idle after ${ready_timeout_s} s (state: ${state:-no answer}); logs:"
  tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
  exit 1
}

start() {
  local t0_ns; t0_ns=$(date +%s%N)
  install_packages
  if alive "$dir/run/slurmctld.pid" && alive "$dir/run/slurmd.pid"; then
    wait_idle; log "already running (SLURM_CONF=$conf)"; return
  fi
  stop_daemons  # a half-started earlier attempt
  rm -rf "$dir/state" "$dir/spool"
  mkdir -p "$dir"/{etc,state,spool,log,run}
  start_munge
  write_conf
  slurmctld -f "$conf"  # both daemonize and write their pid files
  slurmd -f "$conf" -N localnode
  wait_idle
  log "up in $(( ($(date +%s%N) - t0_ns) / 1000000 )) ms (SLURM_CONF=$conf)"
}

stop_daemons() {
  local pidfile pid
  for pidfile in "$dir/run/slurmd.pid" "$dir/run/slurmctld.pid"; do
    alive "$pidfile" || continue
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    rm -f "$pidfile"
  done
}

stop() {
  stop_daemons
  if [ -e "$dir/run/munged.ours" ] && alive "$munged_pidfile"; then
    kill "$(cat "$munged_pidfile")"  # only a munged this script started
  fi
  rm -f "$dir/run/munged.ours"
  if [ -e "$dir/run/link.ours" ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$conf" ]; then
    $SUDO rm -f /etc/slurm/slurm.conf
  fi
  rm -f "$dir/run/link.ours"
  log "stopped"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
