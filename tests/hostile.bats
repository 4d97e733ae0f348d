#!/usr/bin/env bats
# Hostile input: 290 corrupted datasets (tests/hostile/make-datasets.py: truncations, bit
# flips in the header and the arrays, wrong versions, huge counts, lengths of 2^31-1 and -1,
# pointers past the end, document indices out of order, FIFOs, directories and devices)
# through mt-index verify and stat, mt-train, mt-eval and mt-blend: no signal, no hang, no
# sanitizer report, every exit status as docs/conventions.md says. make test runs this
# suite with the tools built by make sanitize (AddressSanitizer and UBSan, MT_SAN_BUILD);
# run alone it takes $BUILD-san/bin when that exists, else $BUILD/bin.
load helpers
cpu_only

# the sanitized tools first on PATH (helpers.bash puts $BUILD/bin there for every test)
san_first() {
	local san=${MT_SAN_BUILD:-$MT_BUILD-san}
	case $san in /*) ;; *) san=$MT_ROOT/$san ;; esac
	if [ -x "$san/bin/mt-train" ]; then
		export PATH="$san/bin:$PATH"
	fi
}

setup_file() {
	san_first
	export OMP_NUM_THREADS=1
	export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=86
	export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=86
	D=$BATS_FILE_TMPDIR/ds
	python3 "$MT_ROOT/tests/hostile/make-datasets.py" "$D"
	# the checkpoint mt-eval scores the cases with, trained on the untouched dataset
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --tokenizer-type NullTokenizer --vocab-size 200 \
		--seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 \
		--eval-iters 0 --split 100,0,0 --data-path "$D/good" --data-cache-path "$D/cache/ck" --save "$D/ck"
}

setup() {
	san_first
	cd "$BATS_TEST_TMPDIR"
	D=$BATS_FILE_TMPDIR/ds
}

# every case through one tool, four at a time (the runs mostly wait on start-up)
run_all() {
	cut -f1 "$D/cases.tsv" | xargs -P 4 -n 1 "$MT_ROOT/tests/hostile/run-case.sh" "$1" "$D"
	run python3 "$MT_ROOT/tests/hostile/check.py" "$1" "$D"
	printf '%s\n' "$output"
	[ "$status" -eq 0 ]
}

@test "the suite has at least 250 corrupted datasets, the same every run, and runs sanitized tools under make test" {
	[ "$(grep -vc $'\tok\t' "$D/cases.tsv")" -ge 250 ]
	python3 "$MT_ROOT/tests/hostile/make-datasets.py" again 2>/dev/null
	for f in "$D"/*.idx; do
		[ -f "$f" ] || continue
		cmp -s "$f" "again/${f##*/}" || { echo "${f##*/} differs between runs"; false; }
	done
	if [ -n "${MT_SAN_BUILD:-}" ]; then # make test hands the sanitized build over
		for t in mt-index mt-train mt-eval mt-blend; do
			command -v $t | grep -q -- '-san/bin/'
			nm "$(command -v $t)" | grep -q __asan_init
		done
	fi
}

@test "mt-index verify: one run over every case agrees with the format, case by case" {
	mapfile -t names < <(cut -f1 "$D/cases.tsv")
	run -4 --separate-stderr timeout 60 mt-index verify "${names[@]/#/$D/}"
	! grep -E 'Sanitizer|runtime error:' <<<"$stderr"
	while IFS=$'\t' read -r name expect _; do
		case $expect in
		ok) grep -qx "ok $D/$name: .*" <<<"$output" || { echo "$name: valid, not ok"; false; } ;;
		data) grep -q "^$D/$name: " <<<"$output" || { echo "$name: corrupt, no problem listed"; false; } ;;
		io) grep -q "error: .*'$D/$name\.\(idx\|bin\)'" <<<"$stderr" || { echo "$name: no error naming it"; false; } ;;
		esac
	done < "$D/cases.tsv"
}

@test "mt-index stat: exit 0, 3 or 4 as the format says, never a signal" {
	run_all stat
}

@test "mt-train: one step on each case; every corrupt one refused with exit 3 before training" {
	run_all train
}

@test "mt-eval: each case as the valid split of a checkpoint" {
	run_all eval
}

@test "mt-blend build: each case" {
	run_all blend
}
