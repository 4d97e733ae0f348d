# Shared set-up for the Bats suites: the built tools and test helpers first on
# PATH, and a skip for tests that need a GPU.
bats_require_minimum_version 1.5.0

MT_ROOT=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
MT_BUILD=${BUILD:-build}
case $MT_BUILD in /*) ;; *) MT_BUILD=$MT_ROOT/$MT_BUILD ;; esac
export PATH="$MT_BUILD/bin:$MT_BUILD/tests:$PATH"

MT_TOOLS="mt-tokenize mt-index mt-blend mt-train mt-ckpt-reshard mt-eval mt-generate"

# GPU tests carry "# bats test_tags=gpu" and call this first.
need_gpu() {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 ||
		skip "no GPU on this machine"
}

# Suites that test the CPU backend call this at the top: with no CUDA device visible,
# mt-train and mt-eval default to the CPU (their default is cuda when a GPU is visible),
# also in ranks started by mpiexec, srun and sbatch, which inherit the environment. On a
# machine without a GPU it changes nothing; GPU suites do not call it.
cpu_only() {
	export CUDA_VISIBLE_DEVICES=
}

# The checkpoint-hash helper (tests/helpers/ckpt-hash.c, built by make test), wrapped so
# that a failure (not built, unreadable checkpoint) prints a value no other call prints:
# then [ "$(ckpt-hash A)" = "$(ckpt-hash B)" ] cannot pass by comparing two empty strings.
ckpt-hash() {
	local h
	if h=$(command ckpt-hash "$@") && [ -n "$h" ]; then
		printf '%s\n' "$h"
		return 0
	fi
	echo "ckpt-hash $* failed (is build/tests/ckpt-hash built? make test builds it)" >&2
	printf 'ckpt-hash-failed-%s-%s\n' "$BASHPID" "$RANDOM"
	return 1
}

# The PID of rank $2 of the mt-train run tagged MT_TEST_TAG=$1 (read from the environment
# of our own processes, so nothing is looked up by name; MPICH, PMIx and Open MPI ranks)
rank_pid() {
	local p
	for p in /proc/[0-9]*; do
		{ [ "$(cat "$p/comm")" = mt-train ] &&
			tr '\0' '\n' < "$p/environ" | grep -qx "MT_TEST_TAG=$1" &&
			tr '\0' '\n' < "$p/environ" | grep -Eqx "(PMI_RANK|PMIX_RANK|OMPI_COMM_WORLD_RANK)=$2" &&
			echo "${p#/proc/}"; } 2>/dev/null
	done | head -1
}

# The GPU layout tests' comparisons of two --log-json files.
# close A.jsonl B.jsonl TOL: per-step loss and gradient norm within TOL (relative)
close() {
	python3 - "$@" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(a) == len(b) and a, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        worst = max(worst, abs(x[k] - y[k]) / abs(y[k]))
print(f"worst relative difference {worst:.3g} over {len(a)} steps (limit {tol})")
sys.exit(0 if worst <= tol else 1)
PY
}

fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "grad_norm")})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}
