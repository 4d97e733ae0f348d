#!/usr/bin/env bats
# mt-train on a GPU, as users run it: the CUDA backend against the CPU backend, checkpoints
# moving between the two, bit-identical reruns, fp16 loss scaling, the up-front memory
# refusal, the PyTorch reference on the GPU backend's numbers, and a 200-step bf16 loss
# curve on the demo corpus against the fp32 CPU curve. Every test is tagged gpu and skips
# where no GPU is found (CI has none); tests/unit/test_cuda.c checks each kernel.
load helpers

# the Python with torch and h5py for the PyTorch reference (Debian's, or the GPU host's)
PY=${MT_PYTHON:-/usr/bin/python3}

setup() {
	cd "$BATS_TEST_TMPDIR"
	TINY=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 200 --mock-data
		--micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-iters 0)
	LLAMA=(--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
		--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2)
}

# close A.jsonl B.jsonl TOL [FIRST]: the losses of iterations >= FIRST agree within TOL (relative)
close() {
	python3 - "$@" <<'PY'
import json, sys
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
def losses(p):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if r["iteration"] >= first}
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert a and sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max(abs(a[i] - b[i]) / abs(b[i]) for i in a)
print(f"worst relative loss difference {worst:.3g} over {len(a)} iterations (limit {tol})")
sys.exit(0 if worst <= tol else 1)
PY
}

# bats test_tags=gpu
@test "gpu: fp32 on the GPU trains like the CPU, GPT-2 and Llama style (losses within 1e-4 over 10 steps)" {
	need_gpu
	mt-train "${TINY[@]}" --train-iters 10 --device cpu --log-json cpu.jsonl -q
	mt-train "${TINY[@]}" --train-iters 10 --device cuda --log-json gpu.jsonl -q
	close gpu.jsonl cpu.jsonl 1e-4
	mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 10 --device cpu --log-json lcpu.jsonl -q
	mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 10 --device cuda --log-json lgpu.jsonl -q
	close lgpu.jsonl lcpu.jsonl 1e-4
}

# bits A.jsonl: each iteration's loss and gradient norm, every digit
bits() {
	python3 -c 'import json, sys; [print(repr(r["loss"]), repr(r["grad_norm"])) for r in map(json.loads, open(sys.argv[1]))]' "$1"
}

# bats test_tags=gpu
@test "gpu: --deterministic bf16 runs repeat bit for bit (losses and gradient norms)" {
	need_gpu
	for r in 1 2; do
		mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 8 --device cuda --bf16 --deterministic --log-json r$r.jsonl -q
		bits r$r.jsonl > r$r.txt
	done
	cmp r1.txt r2.txt
	[ "$(wc -l < r1.txt)" -eq 8 ]
	# the weight gradients' first products of a step overwrite instead of adding to a zeroed
	# buffer: the same bits as zeroing the whole gradient first
	MT_CUDA_FIRST_WRITE=0 mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 8 --device cuda --bf16 --deterministic \
		--log-json r0.jsonl -q
	bits r0.jsonl > r0.txt
	cmp r1.txt r0.txt
	# head size 64 over 512 positions: on Hopper the five-product attention backward with its
	# query gradients added in a fixed order, GPT-2 and Llama style
	W=(--hidden-size 128 --num-attention-heads 2 --seq-length 512 --micro-batch-size 2)
	for m in g l; do
		[ $m = l ] && X=("${LLAMA[@]}") || X=()
		for r in 1 2; do
			mt-train "${TINY[@]}" "${X[@]}" "${W[@]}" --train-iters 6 --device cuda --bf16 --deterministic \
				--log-json $m$r.jsonl -q
			bits $m$r.jsonl > $m$r.txt
		done
		cmp ${m}1.txt ${m}2.txt
		[ "$(wc -l < ${m}1.txt)" -eq 6 ]
	done
}

# bats test_tags=gpu
@test "gpu: MT_CUDA_MATMUL_TUNING times each product once, saves its picks, and later runs repeat bit for bit" {
	need_gpu
	export MT_CUDA_MATMUL_TUNING=$PWD/tune.tsv MT_CUDA_MATMUL_TUNING_MS=2
	run -0 --separate-stderr mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 3 --device cuda --bf16 --deterministic \
		--log-json t1.jsonl
	echo "$stderr" | grep "matmul tuning"
	[[ $stderr == *"tune.tsv: 0 picks for this device"* ]]
	tuned=$(echo "$stderr" | grep -c "matmul tuning: .* candidates: ")
	[ "$tuned" -ge 6 ]
	[ "$(grep -vc '^#' tune.tsv)" -eq "$tuned" ]
	head -3 tune.tsv
	# every line's algorithm id, tile and stages read from cuBLASLt
	[ "$(grep -v '^#' tune.tsv | awk -F'\t' '$15 < 0 || $16 < 0 || $17 < 0' | wc -l)" -eq 0 ]
	for r in 2 3; do
		run -0 --separate-stderr mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 8 --device cuda --bf16 \
			--deterministic --log-json t$r.jsonl
		[[ $stderr == *"tune.tsv: $tuned picks for this device"* ]]
		[[ $stderr != *"candidates: "* ]]
		bits t$r.jsonl > t$r.txt
	done
	cmp t2.txt t3.txt
	[ "$(wc -l < t2.txt)" -eq 8 ]
	# the picks train as the first candidates do
	MT_CUDA_MATMUL_TUNING= mt-train "${TINY[@]}" "${LLAMA[@]}" --train-iters 8 --device cuda --bf16 --deterministic \
		--log-json t0.jsonl -q
	close t2.jsonl t0.jsonl 2e-3
	# a file that does not parse, a duration that is not one
	printf '# picks\nNVIDIA X\tcuBLASLt 1\tbf16\n' > bad.tsv
	MT_CUDA_MATMUL_TUNING=$PWD/bad.tsv run -3 --separate-stderr mt-train "${TINY[@]}" --train-iters 1 --device cuda
	[[ $stderr == *"MT_CUDA_MATMUL_TUNING: $PWD/bad.tsv:2: 3 tab-separated fields, expected 25"* ]]
	MT_CUDA_MATMUL_TUNING_MS=soon run -2 --separate-stderr mt-train "${TINY[@]}" --train-iters 1 --device cuda
	[[ $stderr == *"MT_CUDA_MATMUL_TUNING_MS=soon: expected milliseconds"* ]]
	[ "$(grep -vc '^#' tune.tsv)" -eq "$tuned" ]
}

# bats test_tags=gpu
@test "gpu: a GPU checkpoint resumes on the CPU, and a CPU checkpoint on the GPU" {
	need_gpu
	mt-train "${TINY[@]}" --train-iters 10 --device cuda --save g --save-interval 5 --log-json g.jsonl -q
	mt-train "${TINY[@]}" --train-iters 10 --device cpu --load g/iter_0000005 --log-json g2c.jsonl -q
	close g2c.jsonl g.jsonl 1e-4 6
	mt-train "${TINY[@]}" --train-iters 10 --device cpu --save c --save-interval 5 --log-json c.jsonl -q
	mt-train "${TINY[@]}" --train-iters 10 --device cuda --load c/iter_0000005 --log-json c2g.jsonl -q
	close c2g.jsonl c.jsonl 1e-4 6
	# bf16 runs keep fp32 master weights: their checkpoints load on the CPU as well
	mt-train "${TINY[@]}" --train-iters 4 --device cuda --bf16 --save b -q
	run -0 --separate-stderr mt-train "${TINY[@]}" --train-iters 6 --device cpu --load b --log-json b.jsonl
	[[ $stderr == *"loaded checkpoint"* ]]
}

# bats test_tags=gpu
@test "gpu: fp16 with dynamic loss scaling skips and logs overflow steps, then tracks fp32" {
	need_gpu
	run -0 --separate-stderr mt-train "${TINY[@]}" --train-iters 40 --device cuda --fp16 --initial-loss-scale 65536 \
		--hysteresis 1 --loss-scale-window 10 --log-json h.jsonl
	echo "$stderr" | grep -c "gradient overflow" || true
	mt-train "${TINY[@]}" --train-iters 40 --device cuda --log-json f.jsonl -q
	python3 - <<'PY'
import json
h = [json.loads(l) for l in open("h.jsonl")]
f = [json.loads(l) for l in open("f.jsonl")]
assert h[-1]["skipped"] < 40, h[-1]
d = abs(h[-1]["loss"] - f[-1]["loss"]) / f[-1]["loss"]
print("fp16 final loss", h[-1]["loss"], "fp32", f[-1]["loss"], "rel", d, "skipped", h[-1]["skipped"])
assert d < 0.02
PY
}

# bats test_tags=gpu
@test "gpu: a model that cannot fit is refused at start with the memory plan's numbers" {
	need_gpu
	run -4 --separate-stderr mt-train --num-layers 48 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 \
		--vocab-size 50257 --mock-data --micro-batch-size 64 --train-iters 1 --device cuda --bf16
	[[ $stderr == *"mt-train: error: the model does not fit the GPU: it needs"* ]]
	[[ $stderr == *"activations"* && $stderr == *"GiB are free"* ]]
}

torch_check_gpu() {
	"$PY" -c 'import h5py, numpy, torch' 2>/dev/null || skip "$PY lacks torch or h5py (set MT_PYTHON)"
	"$PY" -c 'import numpy as np
r = np.random.RandomState(7)
tok, tgt = r.randint(0, 50, 32), r.randint(0, 50, 32)
tgt[[3, 17, 31]] = -1
np.save("batch.npy", np.stack([tok, tgt]).astype(np.int32))'
	gpt-step --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 50 \
		--make-vocab-size-divisible-by 16 --seed 1234 --tokens batch.npy --output step --device cuda "$@"
	"$PY" "$MT_ROOT/tests/reference/torch_gpt.py" --tokens batch.npy step
}

# bats test_tags=gpu
@test "gpu: PyTorch reference on the CUDA backend (fp32), GPT-2 style" {
	need_gpu
	torch_check_gpu
}

# bats test_tags=gpu
@test "gpu: PyTorch reference on the CUDA backend (fp32), Llama style" {
	need_gpu
	torch_check_gpu --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear \
		--untie-embeddings-and-output-weights --num-query-groups 2
}

# bats test_tags=gpu
@test "gpu: 200 bf16 steps on the demo corpus track the fp32 CPU curve (20-step means within 2%)" {
	need_gpu
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 4000 > corpus.jsonl
	mt-tokenize train -q --input corpus.jsonl --vocab-size 1024 --output-prefix bpe
	mt-tokenize -q --input corpus.jsonl --tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json \
		--merge-file bpe-merges.txt --append-eod --output-prefix corpus
	D=(--data-path corpus_text_document --tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json
		--merge-file bpe-merges.txt --split 98,2,0 --data-cache-path cache --num-layers 4 --hidden-size 128
		--num-attention-heads 4 --seq-length 128 --micro-batch-size 16 --global-batch-size 16 --train-iters 200
		--lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 20 --log-interval 1 --eval-iters 0)
	mt-train "${D[@]}" --device cpu --log-json cpu.jsonl -q
	mt-train "${D[@]}" --device cuda --bf16 --log-json bf16.jsonl -q
	python3 - <<'PY'
import json
c = [json.loads(l)["loss"] for l in open("cpu.jsonl")]
b = [json.loads(l)["loss"] for l in open("bf16.jsonl")]
assert len(c) == len(b) == 200
worst = 0
for k in range(0, 200, 20):
    mc, mb = sum(c[k:k + 20]) / 20, sum(b[k:k + 20]) / 20
    worst = max(worst, abs(mb - mc) / mc)
    print(f"steps {k + 1}-{k + 20}: fp32 cpu {mc:.4f} bf16 gpu {mb:.4f}")
print(f"worst window {worst:.4f}; loss {c[0]:.3f} -> {c[-1]:.3f}")
assert c[-1] < c[0] - 1.0, "the model did not learn"
assert worst < 0.02
PY
}
