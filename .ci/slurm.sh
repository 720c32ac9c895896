#!/usr/bin/env bash
# A throwaway one-node SLURM cluster on loopback for the tests of `convgrid run/tune --slurm`.
#
#   eval "$(bash .ci/slurm.sh)"        # install if needed, start, print `export SLURM_CONF=...`
#   bash .ci/slurm.sh stop             # stop slurmctld, slurmd and munged, remove their state
#
# Idempotent: a second start finds the daemons answering and prints the same line. Runs as root on
# Debian (installs `slurm-wlm` and `munge` with apt-get when slurmctld is missing). Its controller and
# its one node are this host on 127.0.0.1, on their own ports (not SLURM's defaults, so a real SLURM on
# the machine is left alone), with their own config, state and logs under $DIR: nothing in /etc/slurm
# is written. munged runs as `munge` with its own socket under $DIR too. The node has this machine's
# CPUs and memory and no GPUs; processes are tracked without cgroups (proctrack/linuxproc), so it runs
# in a container.
set -euo pipefail

DIR="${CONVGRID_SLURM_DIR:-/tmp/convgrid-slurm}"
CTLD_PORT="${CONVGRID_SLURMCTLD_PORT:-46817}"
SLURMD_PORT="${CONVGRID_SLURMD_PORT:-46818}"
CONF="$DIR/slurm.conf"
SOCKET="$DIR/munge/munge.socket"

stop_pidfile() {
    local file="$1" pid
    [ -f "$file" ] || return 0
    pid="$(cat "$file" 2>/dev/null || true)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$file"
}

if [ "${1:-start}" = "stop" ]; then
    stop_pidfile "$DIR/slurmd.pid"
    stop_pidfile "$DIR/slurmctld.pid"
    stop_pidfile "$DIR/munge/munged.pid"
    rm -rf "$DIR"
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm.sh: installing slurm-wlm and munge" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q slurm-wlm munge >&2
fi

mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
chown munge:munge "$DIR/munge"
chmod 0755 "$DIR/munge"  # munged wants its socket's folder searchable by all
if [ ! -f "$DIR/munge/munge.key" ]; then
    # A key of this cluster's own (the package's /etc/munge/munge.key is left as it is).
    runuser -u munge -- mungekey --create --keyfile="$DIR/munge/munge.key" >&2
fi
if ! [ -S "$SOCKET" ] || ! munge -n --socket="$SOCKET" >/dev/null 2>&1; then
    runuser -u munge -- munged --key-file="$DIR/munge/munge.key" --socket="$SOCKET" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" >&2
fi

NODE="$(hostname -s)"
CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
cat >"$CONF.new" <<EOF
# Written by .ci/slurm.sh: a one-node test cluster on loopback.
ClusterName=convgrid-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET,cred_expire=5
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
mv "$CONF.new" "$CONF"
export SLURM_CONF="$CONF"

up() { scontrol ping 2>/dev/null | grep -q "is UP"; }
if ! up; then
    slurmctld -f "$CONF" >&2
fi
if ! [ -f "$DIR/slurmd.pid" ] || ! kill -0 "$(cat "$DIR/slurmd.pid")" 2>/dev/null; then
    slurmd -f "$CONF" >&2
fi
# Ready once the node takes jobs (idle), at most 30 s.
for _ in $(seq 300); do
    if up && sinfo -h -N -o "%t" 2>/dev/null | grep -Eq "^(idle|mix|alloc)"; then
        echo "export SLURM_CONF=$CONF"
        exit 0
    fi
    sleep 0.1
done
echo "slurm.sh: the node did not become idle; see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
sinfo -N >&2 || true
exit 1
