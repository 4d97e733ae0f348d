#!/usr/bin/env bash
# A real one-node Slurm for the template tests: munge, slurmctld and slurmd from the
# Debian packages, started by hand (no systemd), everything under one scratch folder.
#
#   tests/slurm/cluster.sh start DIR   start, wait until the node is idle; prints
#                                      "export SLURM_CONF=DIR/slurm.conf" to eval
#   tests/slurm/cluster.sh stop DIR    stop the daemons by their pid files
#   tests/slurm/cluster.sh check       exit 0 when this machine can run one (root and
#                                      the packages), else print why and exit 1
#
# Needs root. Daemons are stopped by the PIDs in their pid files, never by name. The
# cluster's ports are picked from the scratch folder's name so that two clusters (or a
# stale one) do not collide.
set -euo pipefail

die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 1; }

check() {
	[ "$(id -u)" -eq 0 ] || { echo "not root (slurmd and munged need root)"; return 1; }
	local c
	for c in munged slurmctld slurmd sbatch squeue sinfo; do
		command -v "$c" >/dev/null 2>&1 ||
			{ echo "$c not found (scripts/install-deps.sh installs munge slurmctld slurmd slurm-client)"; return 1; }
	done
	[ -r /etc/munge/munge.key ] || { echo "/etc/munge/munge.key is missing (the munge package makes it)"; return 1; }
}

stop_pidfile() { # TERM, then KILL after 10 s
	local f=$1 pid
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
}

start() {
	local dir=$1 host mem cpus port
	why=$(check) || die "$why"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	chmod 755 "$dir"
	host=$(hostname -s)
	getent hosts "$host" >/dev/null || echo "127.0.0.1 $host" >> /etc/hosts
	port=$((20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 20000))

	# munge, with its own socket in the scratch folder
	install -d -o munge -g munge -m 0755 "$dir/munge"
	runuser -u munge -- /usr/sbin/munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
		--log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
	for _ in $(seq 1 50); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.1; done
	munge -S "$dir/munge/munge.socket" -n | unmunge -S "$dir/munge/munge.socket" >/dev/null ||
		die "munge does not work (see $dir/munge/munged.log)"

	mkdir -p "$dir/state" "$dir/spool" "$dir/log"
	# at least 8 task slots on the one node, whatever this machine has (the 175B template's
	# test runs TP 2 x PP 4 on 8 ranks): slurmd takes the configured count as given
	cpus=$(nproc)
	[ "$cpus" -ge 8 ] || cpus=8
	# RealMemory above what slurmd detects makes the node unusable: take 90% of it
	mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
	mem=$((mem * 9 / 10))
	cat > "$dir/slurm.conf" <<CONF
ClusterName=mt-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
ReturnToService=2
SwitchType=switch/none
MailProg=/bin/true
SlurmdParameters=config_overrides
SchedulerParameters=defer_batch=0
SchedulerType=sched/backfill
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
	export SLURM_CONF=$dir/slurm.conf
	slurmctld -f "$SLURM_CONF"
	slurmd -f "$SLURM_CONF"
	for _ in $(seq 1 100); do [ -s "$dir/slurmctld.pid" ] && [ -s "$dir/slurmd.pid" ] && break; sleep 0.1; done
	for _ in $(seq 1 150); do
		[ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && { echo "export SLURM_CONF=$dir/slurm.conf"; return 0; }
		sleep 0.2
	done
	die "the node did not become idle: $(sinfo 2>&1); see $dir/log/"
}

stop() {
	local dir=$1
	# jobs first (a test that failed may leave one): slurmd ends their step daemons
	if [ -s "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
		SLURM_CONF=$dir/slurm.conf scancel --user="$(id -un)" 2>/dev/null || true
		for _ in $(seq 1 100); do
			[ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h 2>/dev/null)" ] && break
			sleep 0.2
		done
	fi
	stop_pidfile "$dir/slurmd.pid"
	stop_pidfile "$dir/slurmctld.pid"
	stop_pidfile "$dir/munge/munged.pid"
}

case ${1:-} in
start) start "${2:?start DIR}" ;;
stop) stop "${2:?stop DIR}" ;;
check) check ;;
*) die "usage: cluster.sh start DIR | stop DIR | check" ;;
esac
