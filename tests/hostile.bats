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

# Replace PREFIX (an existing dataset) by running "$@" with a kill at each step of the
# atomic write layer in turn (MT_ATOMIC_KILL_AT=1, 2, ...) until a run completes; after
# every kill a reader must find the old pair, the new pair, or no .idx at all (exit 4).
kill_every_step() {
	local prefix=$1 old=$2 new=$3 n=1 killed=0 rc
	shift 3
	while :; do
		cp "$old.bin" "$prefix.bin" && cp "$old.idx" "$prefix.idx"
		MT_ATOMIC_KILL_AT=$n "$@" >/dev/null 2>&1 && rc=0 || rc=$?
		[ "$rc" -eq 0 ] && break
		[ "$rc" -eq 137 ] || { echo "kill point $n: exit $rc, not SIGKILL"; return 1; }
		killed=$((killed + 1))
		run --separate-stderr timeout 20 mt-index verify "$prefix"
		if [ "$status" -eq 0 ]; then
			if cmp -s "$prefix.idx" "$old.idx" && cmp -s "$prefix.bin" "$old.bin"; then
				:
			elif cmp -s "$prefix.idx" "$new.idx" && cmp -s "$prefix.bin" "$new.bin"; then
				:
			else
				echo "kill point $n: a valid pair that is neither the old nor the new one"
				return 1
			fi
		elif [ "$status" -ne 4 ] || [[ $stderr != *"cannot open '$prefix.idx'"* ]]; then
			echo "kill point $n: exit $status: $stderr $output"
			return 1
		fi
		n=$((n + 1))
		[ $n -lt 200 ] || { echo "no run completed"; return 1; }
		rm -f "$prefix".*.tmp.* "$prefix".*.lens.tmp.* "$prefix".*.docs.tmp.*
	done
	cmp "$prefix.idx" "$new.idx" && cmp "$prefix.bin" "$new.bin"
	echo "# $killed kill points, each read back cleanly"
	[ "$killed" -ge 5 ]
}

@test "replacing a dataset (mt-tokenize, mt-index merge): killed at any step, a reader sees the old pair, the new pair or a clean 'missing'" {
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 300 > a.jsonl
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 200 --seed 7 > b.jsonl
	mt-tokenize train -q --input a.jsonl --vocab-size 300 --output-prefix bpe
	T=(--tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json --merge-file bpe-merges.txt --workers 1 -q)
	mt-tokenize "${T[@]}" --input a.jsonl --output-prefix old
	mt-tokenize "${T[@]}" --input b.jsonl --output-prefix new
	! cmp -s old_text_document.idx new_text_document.idx
	kill_every_step d_text_document old_text_document new_text_document \
		mt-tokenize "${T[@]}" --input b.jsonl --output-prefix d
	# merge: the new pair is old + new
	mt-index merge --output-prefix merged old_text_document new_text_document
	kill_every_step m old_text_document merged \
		mt-index merge -q --output-prefix m old_text_document new_text_document
}

@test "index caches identical to the ones on disk are not rewritten (same inode, same time)" {
	A=(--data-path "$D/good" --seq-length 16 --train-samples 20 --split 90,10,0 --data-cache-path cache)
	mt-blend build "${A[@]}" >/dev/null 2>&1
	before=$(cd cache && stat -c '%n %i %Y.%y' * | sort)
	[ -n "$before" ]
	sleep 1
	mt-blend build "${A[@]}" >/dev/null 2>&1
	[ "$(cd cache && stat -c '%n %i %Y.%y' * | sort)" = "$before" ]
	# a changed one is rewritten
	mt-blend build "${A[@]/20/30}" >/dev/null 2>&1
	[ "$(cd cache && stat -c '%n %i %Y.%y' * | sort)" != "$before" ]
}
