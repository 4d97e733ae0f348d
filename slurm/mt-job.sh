# mt-job.sh: shell functions the sbatch templates share (source it from a job script).
#
#   mt_job_init          log the job, one OpenMP thread pool per task's CPUs, and trap
#                        SIGUSR1/SIGTERM (sbatch --signal=B:USR1@600) to pass them on
#   mt_srun ARGS...      srun --mpi=pmi2 ARGS in the background, forwarding a trapped
#                        signal to it (srun hands it to every task: mt-train's ranks agree
#                        on a step, save and exit 0); returns srun's exit status
#   mt_load_args DIR     "--load DIR" when DIR holds a checkpoint, else nothing
#   mt_latest DIR        the iteration DIR/latest names, or 0
#   mt_requeue_if_signalled
#                        after a signal-and-save stop, put the job back in the queue
#                        (needs #SBATCH --requeue); the next start resumes with --load
#
# MT_SRUN_MPI (default pmi2) is srun's --mpi plugin; MT_SRUN_ARGS adds srun options.
# Nothing here knows a site's paths: the templates set them at their top.

MT_SIGNALLED=0
MT_STEP_PID=

mt_log() { printf '%s mt-job[%s]: %s\n' "$(date -u +%FT%TZ)" "${SLURM_JOB_ID:-local}" "$*" >&2; }

mt_on_signal() {
	MT_SIGNALLED=1
	mt_log "received $1: asking the ranks to save and stop"
	[ -n "$MT_STEP_PID" ] && kill -"$1" "$MT_STEP_PID" 2>/dev/null
	return 0
}

mt_job_init() {
	trap 'mt_on_signal USR1' USR1
	trap 'mt_on_signal TERM' TERM
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
	mt_log "job ${SLURM_JOB_NAME:-?} on ${SLURM_JOB_NODELIST:-$(hostname -s)}: ${SLURM_NTASKS:-1} task(s)," \
		"restart ${SLURM_RESTART_COUNT:-0}, OMP_NUM_THREADS=$OMP_NUM_THREADS"
}

mt_srun() {
	local rc
	# shellcheck disable=SC2086
	srun --mpi="${MT_SRUN_MPI:-pmi2}" --kill-on-bad-exit=1 ${MT_SRUN_ARGS:-} "$@" &
	MT_STEP_PID=$!
	# wait returns early when a trapped signal arrives: wait again until srun is done
	while :; do
		wait "$MT_STEP_PID"
		rc=$?
		kill -0 "$MT_STEP_PID" 2>/dev/null || break
	done
	MT_STEP_PID=
	return $rc
}

mt_latest() {
	if [ -s "$1/latest" ]; then cat "$1/latest"; else echo 0; fi
}

mt_load_args() {
	[ -s "$1/latest" ] && printf -- '--load %s\n' "$1"
	return 0
}

mt_requeue_if_signalled() {
	[ "$MT_SIGNALLED" = 1 ] || return 0
	mt_log "stopped by a signal at iteration $(mt_latest "${1:-.}"): requeueing job $SLURM_JOB_ID"
	scontrol requeue "$SLURM_JOB_ID"
}
