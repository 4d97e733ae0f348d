#!/usr/bin/env bats
# Pipeline parallelism on the CUDA backend, with the stages sharing one GPU: each stage's
# passes on the device, the activations and gradients between stages through host memory
# and MPI, against PP=1 on the same GPU. 1F1B at 2 and 4 stages, interleaved, ZB-H1 (whose
# weight passes add the same products in the same order as 1F1B: the same bits), TP x PP
# with sequence parallelism in bf16, and the checkpoint resumed on the CPU. Every test is
# tagged gpu and skips where no GPU is found (CI has none).
load helpers

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found"
	cd "$BATS_TEST_TMPDIR"
	export OMP_NUM_THREADS=1
	TINY=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 1000 --mock-data
		--micro-batch-size 2 --global-batch-size 16 --lr 1e-3 --log-interval 1 --eval-iters 0 --clip-grad 1.0
		--make-vocab-size-divisible-by 256 --distributed-timeout-seconds 120 --device cuda -q)
	LLAMA=(--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
		--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --ffn-hidden-size 128)
}

# bats test_tags=gpu
@test "gpu: PP=2 and PP=4 (1F1B) and PP=2 interleaved on one GPU (fp32) follow PP=1, GPT-2 and Llama style" {
	need_gpu
	for arch in gpt llama; do
		A=("${TINY[@]}")
		[ $arch = llama ] && A+=("${LLAMA[@]}")
		mt-train "${A[@]}" --train-iters 10 --log-json one-$arch.jsonl
		mpiexec -n 2 mt-train "${A[@]}" --train-iters 10 --pipeline-model-parallel-size 2 --log-json p2-$arch.jsonl
		close p2-$arch.jsonl one-$arch.jsonl 1e-5
		mpiexec -n 4 mt-train "${A[@]}" --train-iters 10 --pipeline-model-parallel-size 4 --log-json p4-$arch.jsonl
		close p4-$arch.jsonl one-$arch.jsonl 1e-5
		mpiexec -n 2 mt-train "${A[@]}" --train-iters 10 --pipeline-model-parallel-size 2 \
			--num-layers-per-virtual-pipeline-stage 1 --log-json v2-$arch.jsonl
		close v2-$arch.jsonl one-$arch.jsonl 1e-5
	done
}

# bats test_tags=gpu
@test "gpu: ZB-H1's split backward gives 1F1B's bits; a second run repeats them" {
	need_gpu
	A=("${TINY[@]}" "${LLAMA[@]}" --train-iters 6 --pipeline-model-parallel-size 4)
	mpiexec -n 4 mt-train "${A[@]}" --log-json f.jsonl --save F
	mpiexec -n 4 mt-train "${A[@]}" --pipeline-schedule zb-h1 --log-json z.jsonl --save Z
	mpiexec -n 4 mt-train "${A[@]}" --pipeline-schedule zb-h1 --log-json z2.jsonl
	diff <(fields f.jsonl) <(fields z.jsonl)
	diff <(fields z.jsonl) <(fields z2.jsonl)
	[ "$(ckpt-hash F)" = "$(ckpt-hash Z)" ]
}

# bats test_tags=gpu
@test "gpu: TP=2 x PP=2 with SP in bf16 follows PP=1 bf16 (2e-2) and repeats its bits" {
	need_gpu
	A=("${TINY[@]}" "${LLAMA[@]}" --bf16 --train-iters 10)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 4 mt-train "${A[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \
		--log-json a.jsonl
	mpiexec -n 4 mt-train "${A[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \
		--log-json b.jsonl
	close a.jsonl one.jsonl 2e-2
	diff <(fields a.jsonl) <(fields b.jsonl)
}

# bats test_tags=gpu
@test "gpu: a PP=2 checkpoint of the GPU (tied embeddings) resumes on the CPU at PP=1 and continues like the GPU run" {
	need_gpu
	A=("${TINY[@]}" --train-iters 7)
	mpiexec -n 2 mt-train "${A[@]}" --pipeline-model-parallel-size 2 --save-interval 5 --save G --log-json g.jsonl
	rm -rf C && mkdir C && cp -R G/iter_0000005 C/ && echo 5 > C/latest
	mt-train "${A[@]}" --device cpu --load C --save C --log-json c.jsonl
	tail -2 g.jsonl > want.jsonl
	close c.jsonl want.jsonl 1e-4
}

# bats test_tags=gpu
@test "gpu: PP=2 with full recompute follows PP=1; ZB-H1 with full recompute is refused with the reason" {
	need_gpu
	A=("${TINY[@]}" --train-iters 5 --recompute-granularity full)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${A[@]}" --pipeline-model-parallel-size 2 --log-json p.jsonl
	close p.jsonl one.jsonl 1e-5
	run --separate-stderr mpiexec -n 2 mt-train "${A[@]}" --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1
	[ "$status" -ne 0 ]
	[[ $stderr == *"zb-h1"*"recompute"* ]] || { echo "$stderr"; false; }
}

# bats test_tags=gpu
@test "gpu: stages sharing a GPU go through host memory by default; --pipeline-parallel-comm nccl is refused there" {
	need_gpu
	A=("${TINY[@]}" --train-iters 1 --pipeline-model-parallel-size 2)
	V=()
	for x in "${A[@]}"; do [ "$x" = -q ] || V+=("$x"); done
	run --separate-stderr mpiexec -n 2 mt-train "${V[@]}"
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	[[ $stderr == *"pipeline stages share a GPU: their transfers go through host memory"* ]] || { echo "$stderr"; false; }
	run --separate-stderr mpiexec -n 2 mt-train "${A[@]}" --pipeline-parallel-comm nccl
	[ "$status" -ne 0 ]
	[[ $stderr == *"--pipeline-parallel-comm nccl: stages share GPU"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mt-train "${A[@]}" --pipeline-parallel-comm udp
	[[ $stderr == *"--pipeline-parallel-comm must be auto, nccl or host"* ]] || { echo "$stderr"; false; }
}
