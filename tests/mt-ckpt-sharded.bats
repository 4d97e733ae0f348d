#!/usr/bin/env bats
# Sharded checkpoints on CPU ranks (MPICH): TP=2 x PP=2 x DP=2 with ZeRO-1 on 8 ranks, every
# rank writing its own part; h5py reads the logical tensors of the index and finds the
# one-process run's; the set resumes at TP=1 x PP=1 x DP=1 and at TP=4 x PP=2 x DP=1; kills
# of one rank at random steps of a save never leave `latest` naming an incomplete set;
# --async-save trains bit for bit as a synchronous save, its thread copies the state while
# the next step runs and the optimizer waits for that copy, and a kill during its background
# copy or write keeps the previous checkpoint; keep-last removes whole sets; mt-ckpt-reshard's
# layout rewrite and merge round-trip bit for bit, optimizer included; bench/ckpt.sh's
# arguments and output on a tiny model.
load helpers
cpu_only

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found (scripts/install-deps.sh installs MPICH)"
	/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || skip "/usr/bin/python3 lacks h5py (scripts/install-deps.sh)"
	cd "$BATS_TEST_TMPDIR"
	export OMP_NUM_THREADS=1
	# 60 symbols padded to 64 at TP=1, 2 and 4 (divisible by 16)
	M=(--config "$MT_ROOT/share/configs/tiny.conf" --num-layers 4 --mock-data --vocab-size 60
		--make-vocab-size-divisible-by 16 --lr 1e-3 --lr-decay-style cosine --clip-grad 1.0
		--weight-decay 0.1 --micro-batch-size 2 --global-batch-size 8 --seq-length 32 --max-position-embeddings 32
		--log-interval 1 --distributed-timeout-seconds 60 -q)
	L3D=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --use-distributed-optimizer)
}

# per-step loss and gradient norm of two JSON logs within a relative tolerance
close() {
	python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
assert len(a) == len(b) and len(a) > 0, (len(a), len(b))
for x, y in zip(a, b):
    assert x["iteration"] == y["iteration"], (x, y)
    for k in ("loss", "grad_norm"):
        r = abs(x[k] - y[k]) / abs(x[k])
        assert r <= tol, "iteration %d %s: %r against %r (relative %.3g)" % (x["iteration"], k, x[k], y[k], r)
PY
}

fields() {
	python3 -c 'import json,sys; [print(json.dumps({k: d[k] for k in ("iteration", "loss", "lr", "grad_norm")})) for d in map(json.loads, open(sys.argv[1]))]' "$1"
}

# every logical tensor of index $1 read by h5py: no NaN (a hole of the virtual datasets)
# and, with $2, equal to that file's within a tolerance (weights 2e-5, moments 2e-3 of the
# tensor's largest value: the layouts sum in other orders, and AdamW divides by them)
h5same() {
	/usr/bin/python3 - "$@" <<'PY'
import sys, h5py, numpy as np
def walk(g, pre=""):
    out = {}
    for k, v in g.items():
        out.update(walk(v, pre + k + "/") if isinstance(v, h5py.Group) else {pre + k: v})
    return out
a = walk(h5py.File(sys.argv[1], "r"))
assert len(a) > 20, len(a)
for k, v in a.items():
    if v.dtype.kind == "f":
        assert not np.isnan(v[()]).any(), "%s holds NaN" % k
if len(sys.argv) > 2:
    b = walk(h5py.File(sys.argv[2], "r"))
    assert sorted(a) == sorted(b), set(a) ^ set(b)
    for k in b:
        x, y = a[k][()], b[k][()]
        assert x.shape == y.shape, (k, x.shape, y.shape)
        if y.dtype.kind == "f" and y.size:
            tol = 2e-5 if k.startswith("model/") else 2e-3 * float(np.abs(y).max()) + 1e-12
            assert float(np.abs(x - y).max()) <= tol, (k, float(np.abs(x - y).max()), tol)
PY
}

@test "TP=2 x PP=2 x DP=2 with ZeRO-1: every rank writes its part, h5py reads the one-process tensors, resumes at 1x1x1 and 4x2x1" {
	mpiexec -n 8 mt-train "${M[@]}" "${L3D[@]}" --train-iters 7 --save A --save-interval 5 --log-json A.jsonl
	mt-train "${M[@]}" --train-iters 7 --save one --save-interval 5 --log-json one.jsonl
	# 8 parts and the index; each part names the rank that wrote it, in its name and attributes
	[ "$(ls A/iter_0000005 | wc -l)" -eq 9 ]
	/usr/bin/python3 - A/iter_0000005 <<'PY'
import sys, glob, os, h5py
d = sys.argv[1]
seen = set()
for f in sorted(glob.glob(d + "/model-*.h5")):
    h = h5py.File(f, "r")
    t, p, r = (int(h.attrs[k]) for k in ("tp_rank", "pp_rank", "dp_rank"))
    assert os.path.basename(f) == "model-tp%02d-pp%03d-dp%04d.h5" % (t, p, r), f
    assert int(h.attrs["rank"]) == t + 2 * (r + 2 * p), f   # Megatron's order: tp fastest, pp slowest
    assert h.attrs["format"] == "mt-checkpoint-part" and int(h.attrs["world"]) == 8
    assert len(h["model"]) + len(h["optimizer/exp_avg"]) > 0, "rank %d wrote nothing" % h.attrs["rank"]
    seen.add(int(h.attrs["rank"]))
assert seen == set(range(8)), seen
idx = h5py.File(d + "/model.h5", "r")
assert list(idx.attrs["shards"]) and len(idx.attrs["shards"]) == 8
# a tensor split by tensor parallelism is stitched from two parts (a virtual dataset)
ds = idx["model/decoder.layers.0.self_attention.linear_qkv.weight"]
assert ds.is_virtual and len(ds.virtual_sources()) == 2, ds.virtual_sources()
PY
	h5same A/iter_0000005/model.h5 one/iter_0000005/model.h5
	# mt's readers see the one-process names and shapes
	diff <(mt-ckpt-reshard inspect A/iter_0000005 | grep "^tensor" | cut -f1-4) \
		<(mt-ckpt-reshard inspect one/iter_0000005 | grep "^tensor" | cut -f1-4)
	for l in "1 1 1" "8 4 2"; do
		set -- $l
		rm -rf R && mkdir R && cp -R A/iter_0000005 R/ && echo 5 > R/latest
		mpiexec -n "$1" mt-train "${M[@]}" --train-iters 7 --tensor-model-parallel-size "$2" \
			--pipeline-model-parallel-size "$3" --load R --save R --log-json R$1.jsonl
		close <(tail -2 A.jsonl) R$1.jsonl
	done
	# the comparison can fail: resuming from another iteration is another run
	run ! close <(tail -2 one.jsonl) <(head -2 one.jsonl)
}

# The bytes of a TP=2 x PP=2 x DP=2 save, as the code before the checkpoint transaction moved
# into lib/ckpt/ (issue 42) wrote them: with the learning rate at 0 and no optimizer state the
# files hold the initialization only, which is counter-based and needs no BLAS, so the sums
# hold on any machine with this HDF5. tests/reference/h5-untime.py zeroes only HDF5's object
# times, the save's pid tag and the checksums over them.
@test "a TP=2 x PP=2 x DP=2 save writes the same bytes as before the checkpoint transaction moved into lib/ckpt" {
	# the arguments are stored in the checkpoint: the config by a path that is the same everywhere
	cp "$MT_ROOT/share/configs/tiny.conf" . && M[1]=tiny.conf
	mpiexec -n 8 mt-train "${M[@]}" "${L3D[@]}" --lr 0 --train-iters 1 --save ck --no-save-optim
	(cd ck && python3 "$MT_ROOT/tests/reference/h5-untime.py" iter_0000001/* latest*) >got.sum
	cat >want.sum <<'SUMS'
50599884615827f91aba36e9d2a3559848dc4bf335e4b3d6078cc3bcf9fb15c9  iter_0000001/model-tp00-pp000-dp0000.h5
cb61c77c47f1f8c9e873bdf87298bb306f89339207ce8dc346262ea48496740c  iter_0000001/model-tp00-pp000-dp0001.h5
7098ff7e5454adc637e5d5e613a6a0588a32390a24959eb81706ff3b4413e065  iter_0000001/model-tp00-pp001-dp0000.h5
a784c2f195d9b96dcc77c601d6f18b5b0737aae59e98d0d0ace02c6734201a8d  iter_0000001/model-tp00-pp001-dp0001.h5
b3d23035293843ebcbc594278391cc06bb4e97e57a205802412c5b733edce6e0  iter_0000001/model-tp01-pp000-dp0000.h5
f16fa98387b9bc1c7f8c494d590dc895a0aef8681a30dc6241c8e3f65bc55524  iter_0000001/model-tp01-pp000-dp0001.h5
4297711d7ae5e84c70fcdd81f6646632c3c73807b2662e0f0beff93475378f03  iter_0000001/model-tp01-pp001-dp0000.h5
78fb236fd165a5595309be74a8fbc2a4e42b3740bb23db8f3c6eaab76f48375c  iter_0000001/model-tp01-pp001-dp0001.h5
1a8aa312fb975528928d06aa4f61d1714b0703cedf8d72fd2375f12d4ed28790  iter_0000001/model.h5
4355a46b19d348dc2f57c046f8ef63d4538ebb936000f3c9ee954a27460dd865  latest
6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b  latest_checkpointed_iteration.txt
SUMS
	diff want.sum got.sum
	# the comparison can fail: a pid tag left in is a difference
	(cd ck && sha256sum iter_0000001/model-tp00-pp000-dp0000.h5) >raw.sum
	run ! grep -qF "$(cut -d' ' -f1 raw.sum)" want.sum
}

@test "kill -9 of one rank at random steps of a parallel save (20 runs): latest always names a complete, verified set" {
	mpiexec -n 8 mt-train "${M[@]}" "${L3D[@]}" --train-iters 1 --save ck
	last=1
	for i in $(seq 20); do
		r=$((RANDOM % 8)) n=$((1 + RANDOM % 150)) a=
		[ $((i % 2)) -eq 0 ] && a=--async-save
		it=$((last + 2))
		# the environment of one rank only: it kills itself at its n-th durable step
		run timeout 120 mpiexec -n 8 sh -c '[ "$PMI_RANK" = "$0" ] && export MT_ATOMIC_KILL_AT=$1; shift 2; exec mt-train "$@"' \
			"$r" "$n" "${M[@]}" "${L3D[@]}" --train-iters $it --save-interval 1 --load ck --save ck $a
		[ "$status" -ne 124 ] # killed, the others stopped too instead of hanging
		now=$(cat ck/latest)
		[ "$now" -ge "$last" ] && [ "$now" -le "$it" ]
		# complete: every part the index names is there, whole, and every tensor reads
		ckpt-hash ck > /dev/null
		h5same "ck/iter_$(printf %07d "$now")/model.h5"
		last=$now
	done
}

@test "--async-save: bit-identical training to a synchronous save; the copy runs beside the next step, the optimizer waits for it" {
	# MT_TEST_ASYNC_SAVE_LATE (test-only) holds each rank's copy until its step loop waits
	# for it: the copy runs beside the next step's forward and backward passes (the line
	# names the optimizer step it was waited for at), and any change of the weights or
	# moments before that wait (ZeRO-1's update at 8 ranks, the backend's AdamW at one)
	# would be in the checkpoint, which must hold the synchronous save's bits
	for n in 1 8; do
		l=()
		[ "$n" -eq 8 ] && l=("${L3D[@]}")
		mpiexec -n $n mt-train "${M[@]}" "${l[@]}" --train-iters 6 --save S$n --save-interval 2 --log-json S$n.jsonl
		mpiexec -n $n mt-train "${M[@]}" "${l[@]}" --train-iters 6 --save A$n --save-interval 2 --async-save \
			--log-json A$n.jsonl
		MT_TEST_ASYNC_SAVE_LATE=1 timeout 120 mpiexec -n $n mt-train "${M[@]}" "${l[@]}" --train-iters 6 --save H$n \
			--save-interval 2 --async-save --log-json H$n.jsonl 2>H$n.err
		cat H$n.err
		[ "$(grep -c "copy of iteration 2's state began at the optimizer step of iteration 3$" H$n.err)" -eq $n ]
		[ "$(grep -c "copy of iteration 4's state began at the optimizer step of iteration 5$" H$n.err)" -eq $n ]
		[ "$(grep -c "copy of iteration 6's state began at a wait for the whole save$" H$n.err)" -eq $n ]
		for r in A H; do
			diff <(fields S$n.jsonl) <(fields $r$n.jsonl)
			for it in 2 4 6; do
				[ "$(ckpt-hash S$n/iter_000000$it)" = "$(ckpt-hash $r$n/iter_000000$it)" ]
			done
			[ "$(cat $r$n/latest)" = 6 ]
		done
	done
}

@test "--async-save: a kill during the background copy or write leaves the previous checkpoint latest and valid" {
	mt-train "${M[@]}" --train-iters 2 --save ck --save-interval 2 --async-save
	good=$(ckpt-hash ck)
	killed=0
	# the steps of the save at iteration 4 (each tensor of each group is one): the kill lands
	# in the writer thread while the step loop goes on
	for n in 2 20 60 100; do
		run env MT_ATOMIC_KILL_AT=$n mt-train "${M[@]}" --train-iters 4 --save-interval 4 --load ck --save ck --async-save
		if [ "$status" -ne 0 ]; then
			killed=$((killed + 1))
			[ "$(cat ck/latest)" = 2 ]
			[ "$(ckpt-hash ck)" = "$good" ]
			h5same ck/iter_0000002/model.h5
		fi
	done
	[ "$killed" -ge 3 ]
	# the kill in the background copy (its first step), held until the optimizer step of
	# iteration 5 so that it lands in the middle of a training step
	run env MT_ATOMIC_KILL_AT=1 MT_TEST_ASYNC_SAVE_LATE=1 mt-train "${M[@]}" --train-iters 6 --save-interval 4 --load ck \
		--save ck --async-save
	[ "$status" -eq 137 ]
	[[ $output == *"copy of iteration 4's state began at the optimizer step of iteration 5"* ]]
	[ "$(cat ck/latest)" = 2 ]
	[ "$(ckpt-hash ck)" = "$good" ]
}

@test "--async-save: a part holding inf, found by the writer thread, fails the set on every rank; latest stays" {
	local T=(--config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 64 --micro-batch-size 2
		--global-batch-size 4 --seq-length 32 --max-position-embeddings 32 --distributed-timeout-seconds 60 -q)
	mpiexec -n 2 mt-train "${T[@]}" --train-iters 1 --lr 1e-3 --save ck
	# the weights blow up at once; the thread scans the part of iteration 2 and refuses it
	run -3 --separate-stderr mpiexec -n 2 mt-train "${T[@]}" --train-iters 20 --lr 1e38 --clip-grad 0 --load ck \
		--no-load-optim --save ck --save-interval 1 --no-check-for-nan-in-loss-and-grad --async-save
	[[ $stderr == *"refusing to save checkpoint '"*"/iter_0000002': "*" holds inf"* ]]
	[ "$(cat ck/latest)" = 1 ]
	[ "$(ls ck)" = "$(printf 'iter_0000001\nlatest\nlatest_checkpointed_iteration.txt')" ]
}

@test "keep-last removes whole sets; a missing part is refused, naming it, and --load falls back past it" {
	mpiexec -n 8 mt-train "${M[@]}" "${L3D[@]}" --train-iters 4 --save ck --save-interval 1 --keep-last 2
	[ "$(ls ck | grep -c '^iter_')" -eq 2 ]
	[ "$(ls ck/iter_0000003 | wc -l)" -eq 9 ] && [ "$(ls ck/iter_0000004 | wc -l)" -eq 9 ]
	! ls ck | grep -q tmp
	rm ck/iter_0000004/model-tp01-pp001-dp0001.h5
	run -3 --separate-stderr mt-ckpt-reshard inspect ck
	[[ $stderr == *"incomplete"*"model-tp01-pp001-dp0001.h5"* ]]
	# --load falls back to the newest complete set, naming the one it skipped
	run -0 --separate-stderr mpiexec -n 8 mt-train "${M[@]}" "${L3D[@]}" --train-iters 5 --load ck --save ck
	[[ $stderr == *"skipping checkpoint 'ck/iter_0000004'"*"model-tp01-pp001-dp0001.h5"* ]]
	[[ $stderr == *"resumed from 'ck/iter_0000003' instead"* ]]
	[ "$(cat ck/latest)" = 5 ]
}

@test "mt-ckpt-reshard: layout rewrites and merge round-trip bit for bit, optimizer included; the rewritten set resumes" {
	mpiexec -n 8 mt-train "${M[@]}" "${L3D[@]}" --train-iters 5 --save A --save-interval 5 --log-json A.jsonl
	mt-ckpt-reshard -q --load A --save B --target-tensor-parallel-size 4 --target-pipeline-parallel-size 1
	[ "$(ls B/iter_0000005 | tr '\n' ' ')" = "model-tp00-pp000-dp0000.h5 model-tp01-pp000-dp0000.h5 model-tp02-pp000-dp0000.h5 model-tp03-pp000-dp0000.h5 model.h5 " ]
	[ "$(cat B/latest)" = 5 ]
	mt-ckpt-reshard -q --load B --save C --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
	mt-ckpt-reshard merge -q C D
	[ "$(ls D/iter_0000005)" = model.h5 ]
	# the common flags may come before the command word too
	mt-ckpt-reshard -q merge C D2
	[ "$(ckpt-hash D2)" = "$(ckpt-hash D)" ]
	h=$(ckpt-hash A)
	for d in B C D; do
		[ "$(ckpt-hash $d)" = "$h" ]
	done
	mt-ckpt-reshard inspect D | grep -q "^optimizer_step	5"
	h5same D/iter_0000005/model.h5 A/iter_0000005/model.h5
	# a rewritten set is a checkpoint like any: TP=4 resumes from it
	mpiexec -n 4 mt-train "${M[@]}" --train-iters 6 --tensor-model-parallel-size 4 --load B --save B
	[ "$(cat B/latest)" = 6 ]
	run -2 --separate-stderr mt-ckpt-reshard --load A --save E --target-tensor-parallel-size 3
	[ ! -e E/latest ]
}

@test "bench/ckpt.sh: checks its rank counts and directory; a tiny run prints dd's speeds and one row a rank count, and leaves nothing behind" {
	export BUILD=$MT_BUILD
	run -2 "$MT_ROOT/bench/ckpt.sh" 0
	[[ $output == *"'0' is not a rank count"* ]]
	RANKS="2 x" run -2 "$MT_ROOT/bench/ckpt.sh"
	[[ $output == *"RANKS: 'x' is not a rank count"* ]]
	CKPT_BENCH_DIR=missing run -2 "$MT_ROOT/bench/ckpt.sh" 2
	[[ $output == *"CKPT_BENCH_DIR 'missing' is not a directory"* ]]
	MPIEXEC=no-such-mpiexec run -2 "$MT_ROOT/bench/ckpt.sh" 2
	[[ $output == *"'no-such-mpiexec' not found"* ]]
	run -0 "$MT_ROOT/bench/ckpt.sh" -h
	[[ $output == *"CKPT_BENCH_DIR"* && $output == *"MPIEXEC"* ]]
	mkdir scratch
	CKPT_BENCH_DIR=scratch PHDF5=0 HIDDEN=64 LAYERS=2 HEADS=4 VOCAB=512 run -0 "$MT_ROOT/bench/ckpt.sh" 1 2
	echo "$output"
	[[ $output =~ "# disk, "[0-9]+" MiB, median of 3 ".*"conv=fsync "[0-9]+" MB/s".*"oflag=direct "[0-9]+" MB/s" ]]
	grep -Eq '^1 \(one file\) +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9]+% +[0-9.]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$output"
	grep -Eq '^2 \(TP=2\) +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9]+% +[0-9.]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$output"
	[ -z "$(ls -A scratch)" ]
}
