#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, to try `launcher=slurm` and to run the tests marked `slurm`.
#
#   scripts/slurm_local.sh up      # install slurm-wlm + munge if absent, write the config, start, wait for the node
#   scripts/slurm_local.sh status  # sinfo
#   scripts/slurm_local.sh down    # stop the daemons this script started
#
# Needs root (apt-get and slurmd; run it with sudo otherwise). One partition, `debug`, with the machine's
# CPUs and memory (from `slurmd -C`), no accounting (no slurmdbd: job states come from squeue). Plugins
# that need no cgroups or systemd, so it runs in containers too. `up` twice is fine; an /etc/slurm/slurm.conf
# that this script did not write (a real cluster's) is never touched.
set -euo pipefail

MARK="# written by rmsnorm_repro scripts/slurm_local.sh"
CONF=/etc/slurm/slurm.conf
STATE=/var/lib/slurm-local
RUN=/run/slurm-local
WAIT_S=${SLURM_LOCAL_WAIT_S:-60}

say() { echo "slurm_local: $*"; }
die() { echo "slurm_local: error: $*" >&2; exit 1; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sinfo >/dev/null && return
    command -v apt-get >/dev/null || die "slurm-wlm and munge are not installed and there is no apt-get: install them with your package manager"
    say "installing slurm-wlm and munge (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -o Acquire::Retries=3 -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends slurm-wlm munge)
    # a fresh machine has no package lists yet, an old one stale ones: update only when the install needs it
    "${apt[@]}" >/dev/null || { apt-get -o Acquire::Retries=3 update -q >/dev/null && "${apt[@]}" >/dev/null; } \
        || die "apt-get could not install slurm-wlm and munge"
}

start_munge() {
    if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
    mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge "$RUN"
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
    chmod 0700 /etc/munge /var/lib/munge /var/log/munge
    chmod 0400 /etc/munge/munge.key
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    touch "$RUN/munged.ours"  # `down` stops only a munged that `up` started
}

write_config() {
    if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script (a real cluster's?): not touching it"
    fi
    local host node
    host=$(hostname -s)
    # "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24000"
    node=$(slurmd -C | head -1)
    [[ $node == NodeName=* ]] || die "slurmd -C did not describe this machine: $node"
    mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d" "$RUN" /var/log/slurm-local
    cat >"$CONF.new" <<EOF
$MARK
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=/var/log/slurm-local/slurmctld.log
SlurmdLogFile=/var/log/slurm-local/slurmd.log
# no cgroups (containers): processes tracked by their parents, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# no accounting database: sacct has nothing to say, squeue does
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
# a job asking for more than the node has is refused at sbatch, not left pending forever
EnforcePartLimits=ALL
MpiDefault=none
# A signalled job gets KillWait s to checkpoint before SIGKILL. A requeued job waits cred_expire s before
# it may start again (default 120), and a pending job waits for the next scheduling pass (default every
# 60 s): short here, so a requeue test takes seconds, not minutes.
KillWait=10
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=2,bf_interval=2
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    if cmp -s "$CONF.new" "$CONF"; then rm "$CONF.new"; return 1; fi
    mv "$CONF.new" "$CONF"
}

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
    install_packages
    start_munge
    if write_config && running "$RUN/slurmctld.pid"; then
        say "the config changed: restarting slurmctld and slurmd"
        stop_slurm
    fi
    running "$RUN/slurmctld.pid" || slurmctld
    running "$RUN/slurmd.pid" || slurmd
    local host deadline state
    host=$(hostname -s)
    deadline=$((SECONDS + WAIT_S))
    until state=$(sinfo -h -n "$host" -o %T 2>/dev/null) && [[ $state == idle* || $state == mixed* || $state == allocated* ]]; do
        if [[ ${state:-} == down* || ${state:-} == drain* ]]; then
            scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
        fi
        [ $SECONDS -lt "$deadline" ] || die "the node is not up after ${WAIT_S} s (state: ${state:-no answer}); see /var/log/slurm-local/"
        sleep 1
    done
    say "up: partition debug, node $host ($state): $(sinfo -h -o '%c CPUs, %m MB')"
}

stop() {  # stop <pid file>: end that daemon, wait up to 5 s
    running "$1" || return 0
    local pid
    pid=$(cat "$1")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}

stop_slurm() {
    local jobs
    # jobs first: their processes would outlive slurmd
    if running "$RUN/slurmctld.pid" && jobs=$(squeue -h -o %A 2>/dev/null) && [ -n "$jobs" ]; then
        scancel $jobs || true
        for _ in $(seq 30); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.5; done
    fi
    stop "$RUN/slurmd.pid"
    stop "$RUN/slurmctld.pid"
}

down() {
    stop_slurm
    if [ -e "$RUN/munged.ours" ]; then
        stop /run/munge/munged.pid
        rm -f "$RUN/munged.ours"
    fi
    say "down"
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root (apt-get, slurmd): sudo $0 $1"; }

case "${1:-}" in
    up) need_root up; up ;;
    down) need_root down; down ;;
    status) sinfo ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
