#!/bin/bash
# eval-cron.sh CKPT_DIR TEMPLATE LEDGER [SBATCH OPTIONS...]: submit TEMPLATE
# (templates/eval.sbatch) once for every complete checkpoint CKPT_DIR/iter_N not yet in
# LEDGER, and record it there. Meant for cron, e.g. every 15 minutes:
#
#   */15 * * * *  cd /path/to/run && /usr/local/share/mt/slurm/eval-cron.sh \
#       checkpoints/gpt-125m /usr/local/share/mt/templates/eval.sbatch eval/ledger.txt
#
# (cron's PATH is short: give the full path to sbatch's directory in the crontab's PATH=.)
# A checkpoint counts once `latest` has named it or a newer one (mt-train writes
# iter_N completely before moving `latest`). Prints "submitted ITERDIR JOBID" per job.
set -euo pipefail
dir=${1:?usage: eval-cron.sh CKPT_DIR TEMPLATE LEDGER [SBATCH OPTIONS...]}
template=${2:?usage: eval-cron.sh CKPT_DIR TEMPLATE LEDGER [SBATCH OPTIONS...]}
ledger=${3:?usage: eval-cron.sh CKPT_DIR TEMPLATE LEDGER [SBATCH OPTIONS...]}
shift 3
[ -s "$dir/latest" ] || exit 0
latest=$(cat "$dir/latest")
mkdir -p "$(dirname "$ledger")"
touch "$ledger"
# one cron run at a time
exec 9>>"$ledger.lock"
flock -n 9 || exit 0
for it in "$dir"/iter_*; do
	[ -d "$it" ] || continue
	n=${it##*/iter_}
	case $n in *[!0-9]*) continue ;; esac # temporaries of a save in progress
	[ $((10#$n)) -le "$latest" ] || continue
	path=$(cd "$it" && pwd)
	grep -qxF "$path" "$ledger" && continue
	job=$(sbatch --parsable --export=ALL,CHECKPOINT="$path" "$@" "$template")
	echo "$path" >> "$ledger"
	echo "submitted $path ${job%%;*}"
done
