#!/usr/bin/env bats
# Hostile checkpoints: 190 corrupted ones (tests/hostile/make-ckpts.py: truncations, bit
# flips in tensor data, in the parts of a sharded checkpoint and in HDF5 metadata, wrong
# versions and formats, negative and absurd counters, absurd configs, lost or garbled
# checksums, shapes and dtypes that disagree, NaN and infinities, external storage,
# external and soft links, virtual sources outside the directory, missing and truncated
# parts) through mt-ckpt-reshard verify, inspect and export, mt-generate, mt-eval and
# mt-train --load: no signal, no hang, no sanitizer report, every exit status as
# docs/conventions.md says, every corrupted tensor caught by its checksum. Then the
# fall-backs: a broken latest, mt-eval --watch from cron with broken iterations in the
# middle, and a kill at every step of a save with --keep-last. make test runs this suite
# with the tools built by make sanitize (MT_SAN_BUILD); run alone it takes $BUILD-san/bin
# when that exists, else $BUILD/bin.
load helpers
cpu_only

san_first() {
	local san=${MT_SAN_BUILD:-$MT_BUILD-san}
	case $san in /*) ;; *) san=$MT_ROOT/$san ;; esac
	if [ -x "$san/bin/mt-ckpt-reshard" ] && [ -x "$san/bin/mt-generate" ]; then
		export PATH="$san/bin:$PATH"
	fi
}

TINY=(--config "$MT_ROOT/share/configs/tiny.conf" --tokenizer-type NullTokenizer --vocab-size 200 --seq-length 32
	--max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 2 --eval-iters 0 --mock-data)

setup_file() {
	san_first
	export OMP_NUM_THREADS=1
	export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=86
	export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=86
	D=$BATS_FILE_TMPDIR/hc
	mkdir -p "$D"
	cd "$D"
	mt-train -q "${TINY[@]}" --train-iters 4 --save good
	mt-ckpt-reshard -q --load good --save sharded --target-tensor-parallel-size 2
	python3 "$MT_ROOT/tests/hostile/make-datasets.py" ds >/dev/null
	/usr/bin/python3 "$MT_ROOT/tests/hostile/make-ckpts.py" good sharded cases
	cp cases/cases.tsv .
}

setup() {
	san_first
	cd "$BATS_TEST_TMPDIR"
	D=$BATS_FILE_TMPDIR/hc
}

# every case through one tool, three at a time
run_all() {
	cut -f1 "$D/cases.tsv" | xargs -P 3 -n 1 "$MT_ROOT/tests/hostile/run-ckpt-case.sh" "$1" "$D"
	run python3 "$MT_ROOT/tests/hostile/check-ckpt.py" "$1" "$D"
	printf '%s\n' "$output"
	[ "$status" -eq 0 ]
}

@test "the suite has at least 150 corrupted checkpoints, the same every run, and runs sanitized tools under make test" {
	[ "$(grep -vc $'\tok\t' "$D/cases.tsv")" -ge 150 ]
	[ "$(grep -c $'\ttensor\t' "$D/cases.tsv")" -ge 40 ]
	/usr/bin/python3 "$MT_ROOT/tests/hostile/make-ckpts.py" "$D/good" "$D/sharded" again
	cmp "$D/cases.tsv" again/cases.tsv
	for c in flip-data-07 flip-meta-11 flip-part-04 smash-head-3 trunc-tail-2; do # byte edits (h5py stamps times)
		cmp "$D/cases/$c/iter_0000004/model.h5" "again/$c/iter_0000004/model.h5"
	done
	if [ -n "${MT_SAN_BUILD:-}" ]; then
		for t in mt-ckpt-reshard mt-generate mt-eval mt-train; do
			command -v $t | grep -q -- '-san/bin/'
			nm "$(command -v $t)" | grep -q __asan_init
		done
	fi
}

@test "mt-ckpt-reshard verify: every corruption refused with exit 3, naming the tensor" { run_all verify; }
@test "mt-ckpt-reshard inspect: the structure and attributes checked, exit 0 or 3" { run_all inspect; }
@test "mt-ckpt-reshard export: refuses every checkpoint that does not verify" { run_all export; }
@test "mt-generate: refuses every checkpoint that does not verify" { run_all generate; }
@test "mt-eval: refuses every checkpoint that does not verify" { run_all eval; }
@test "mt-train --load: refuses every checkpoint that does not verify" { run_all train; }

@test "verify: an untouched and a sharded checkpoint pass; the checksums are XXH3-64 of the stored floats" {
	run mt-ckpt-reshard verify "$D/good" "$D/sharded"
	[ "$status" -eq 0 ]
	[[ ${lines[0]} == "ok $D/good/iter_0000004/model.h5: iteration 4, 84 tensors, "*" verified against their checksums" ]]
	[ "${#lines[@]}" -eq 2 ]
	# an independent reference: libxxhash through ctypes over h5py's reading of the floats
	/usr/bin/python3 - "$D/good/iter_0000004/model.h5" <<-'EOF'
		import ctypes, sys, h5py, numpy as np
		xx = ctypes.CDLL("libxxhash.so.0"); xx.XXH3_64bits.restype = ctypes.c_uint64
		n = 0
		with h5py.File(sys.argv[1], "r") as f:
		    def check(name, d):
		        global n
		        if isinstance(d, h5py.Dataset) and name != "rng":
		            b = np.ascontiguousarray(d[...], "<f4").tobytes()
		            assert xx.XXH3_64bits(b, len(b)) == int(d.attrs["xxh3"]), name
		            n += 1
		    f.visititems(check)
		assert n == 84, n
	EOF
	# many checkpoints: the worst decides the exit, every one is reported
	run -3 --separate-stderr mt-ckpt-reshard verify "$D/good" "$D/cases/flip-data-03/iter_0000004" "$D/sharded"
	[ "${#lines[@]}" -eq 2 ]
	[[ $stderr == *"flip-data-03"*"does not match its checksum"* ]]
}

@test "a checkpoint written before checksums still loads, saying so once" {
	cp -r "$D/good" old
	/usr/bin/python3 - old/iter_0000004/model.h5 <<-'EOF'
		import sys, h5py
		with h5py.File(sys.argv[1], "r+") as f:
		    del f.attrs["state_xxh3"]
		    def strip(name, d):
		        if isinstance(d, h5py.Dataset):
		            del d.attrs["xxh3"]
		    f.visititems(strip)
	EOF
	run --separate-stderr mt-generate --load old --device cpu --max-tokens 2 "1 2"
	[ "$status" -eq 0 ]
	[ "$(grep -c 'has no checksums' <<<"$stderr")" -eq 1 ]
	run -0 --separate-stderr mt-ckpt-reshard verify old
	[[ $output == *"no checksums stored"* ]]
}

@test "a broken latest falls back to the newest iteration that reads, naming what was skipped" {
	mt-train -q "${TINY[@]}" --train-iters 6 --save-interval 2 --save ck
	# 6 truncated, 4 with a flipped tensor byte: 2 is the newest that reads
	truncate -s 20000 ck/iter_0000006/model.h5
	python3 -c "
import sys
p = 'ck/iter_0000004/model.h5'
b = bytearray(open(p, 'rb').read()); b[-5000] ^= 4; open(p, 'wb').write(b)"
	run --separate-stderr mt-generate --load ck --device cpu --max-tokens 2 "1 2"
	[ "$status" -eq 0 ]
	[[ $stderr == *"skipping checkpoint 'ck/iter_0000006'"* ]]
	[[ $stderr == *"skipping checkpoint 'ck/iter_0000004'"* ]]
	[[ $stderr == *"loaded 'ck/iter_0000002' instead"* ]]
	run --separate-stderr mt-eval --load ck --device cpu --data-path "$D/ds/good" --split 0,100,0 --valid-samples 4 --eval-samples 4 --data-cache-path c
	[ "$status" -eq 0 ]
	[[ $output == *$'\n2 '* || $output == "2 "* ]]
	# a garbled marker: every iteration, newest first
	printf 'garbage\n' > ck/latest
	run --separate-stderr mt-train "${TINY[@]}" --train-iters 3 --load ck
	[ "$status" -eq 0 ]
	[[ $stderr == *"does not hold an iteration number"* ]]
	[[ $stderr == *"loaded checkpoint 'ck/iter_0000002' at iteration 2"* ]]
	[[ $stderr == *"resumed from 'ck/iter_0000002' instead"* ]]
	# nothing reads: the newest's error, exit 3
	rm -rf ck/iter_0000002
	run -3 --separate-stderr mt-generate --load ck --device cpu --max-tokens 2 "1 2"
	[[ $stderr == *"no checkpoint of 'ck' reads"* ]]
}

@test "mt-eval --watch from cron: broken iterations in the middle are recorded as failed, every good one is evaluated" {
	mt-train -q "${TINY[@]}" --train-iters 10 --save-interval 1 --save ck
	mkdir -p ck/iter_0000011          # an empty directory (a killed prune of old)
	truncate -s 9000 ck/iter_0000003/model.h5
	python3 -c "
p = 'ck/iter_0000007/model.h5'
b = bytearray(open(p, 'rb').read()); b[-3000] ^= 1; open(p, 'wb').write(b)"
	rm ck/iter_0000005/model.h5
	W=(mt-eval --watch ck --ledger L --device cpu --data-path "$D/ds/good" --split 0,100,0 --valid-samples 4 --eval-samples 4 --data-cache-path c)
	run -3 --separate-stderr "${W[@]}"
	for it in 1 2 4 6 8 9 10; do
		grep -q "\"iteration\": $it, \"task\": \"valid\"\|\"iteration\":$it,\"task\":\"valid\"" L || { echo "iteration $it not evaluated"; cat L; false; }
	done
	for it in 3 5 7 11; do
		grep "\"task\":\"failed\"" L | grep -q "\"iteration\":$it," || { echo "iteration $it not recorded as failed"; cat L; false; }
	done
	grep '"iteration":7,' L | grep -q 'checksum'
	# the next cron run: nothing new, failures not retried
	run -0 --separate-stderr "${W[@]}"
	[ "$(grep -c '"task":"failed"' L)" -eq 4 ]
	# a failed iteration that changes is tried again
	cp ck/iter_0000006/model.h5 ck/iter_0000005/model.h5
	run --separate-stderr "${W[@]}"
	[[ $stderr == *"iter_0000005"* ]]
	[ "$(grep -c '"task":"failed"' L)" -eq 5 ]   # its iteration attribute says 6: refused again, recorded again
}

@test "a kill at every step of a save with --keep-last: the next run resumes cleanly, no iter_N is empty or partial" {
	mt-train -q "${TINY[@]}" --train-iters 3 --save-interval 1 --keep-last 2 --save ck
	# the steps of one save (iteration 4) and its prune (iteration 2 goes)
	steps=$(MT_ATOMIC_KILL_AT=1000000 MT_ATOMIC_KILL_LOG=1 mt-train -q "${TINY[@]}" --train-iters 4 --save-interval 1 --keep-last 2 --load "$(cp -r ck s && echo s)" --save s 2>&1 | grep -c "atomic step")
	[ "$steps" -gt 10 ]
	for n in $(seq 1 "$steps"); do
		rm -rf k
		cp -r ck k
		run env MT_ATOMIC_KILL_AT=$n mt-train -q "${TINY[@]}" --train-iters 4 --save-interval 1 --keep-last 2 --load k --save k
		[ "$status" -eq 137 ] || { echo "step $n of $steps: no kill ($status)"; false; }
		# every iter_N there is complete
		for it in k/iter_*; do
			case $it in *.tmp.* | *.old.*) continue ;; esac
			mt-ckpt-reshard verify "$it" >/dev/null || { echo "kill at step $n left a broken $it"; ls -R k; false; }
		done
		# and the next run resumes, removing what the killed one left
		run mt-train -q "${TINY[@]}" --train-iters 5 --save-interval 1 --keep-last 2 --load k --save k
		[ "$status" -eq 0 ] || { echo "kill at step $n: the next run failed: $output"; false; }
		[ "$(cat k/latest)" = 5 ]
		[ "$(ls -d k/iter_* | grep -c -v '\.')" -eq 2 ]
		! ls -d k/iter_*.old.* k/iter_*.tmp.* 2>/dev/null
	done
}
