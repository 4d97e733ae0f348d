#!/usr/bin/env bats
# Tensor parallelism on the CUDA backend, with two ranks sharing one GPU: their split
# points go through host memory and MPI (the CUDA TP path's arithmetic, without NCCL,
# which refuses two ranks of one communicator on one GPU), against TP=1 on the same GPU.
# GPT-2 style and Llama style, with and without sequence parallelism, fp32, bf16 and fp16,
# full recompute; bit-identical reruns; the checkpoint resumed on the CPU at another layout. Every test
# is tagged gpu and skips where no GPU is found (CI has none); multi-GPU runs over NCCL
# belong to the multi-GPU benchmarks.
load helpers

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found"
	cd "$BATS_TEST_TMPDIR"
	export OMP_NUM_THREADS=1
	# vocabulary 1000 padded to 1024 at TP 1 and 2 (divisible by 128 x TP)
	TINY=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 1000 --mock-data
		--micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --log-interval 1 --eval-iters 0 --clip-grad 1.0
		--make-vocab-size-divisible-by 256 --distributed-timeout-seconds 120 --device cuda -q)
	LLAMA=(--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
		--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --ffn-hidden-size 128)
}

# bats test_tags=gpu
@test "gpu: TP=2 on one GPU (fp32), with and without SP, follows TP=1 within 1e-4, GPT-2 and Llama style" {
	need_gpu
	for arch in gpt llama; do
		A=("${TINY[@]}")
		[ $arch = llama ] && A+=("${LLAMA[@]}")
		mt-train "${A[@]}" --train-iters 10 --log-json one-$arch.jsonl
		mpiexec -n 2 mt-train "${A[@]}" --train-iters 10 --tensor-model-parallel-size 2 --log-json tp-$arch.jsonl
		close tp-$arch.jsonl one-$arch.jsonl 1e-4
		mpiexec -n 2 mt-train "${A[@]}" --train-iters 10 --tensor-model-parallel-size 2 --sequence-parallel \
			--log-json sp-$arch.jsonl
		close sp-$arch.jsonl one-$arch.jsonl 1e-4
	done
}

# bats test_tags=gpu
@test "gpu: TP=2 with SP in bf16 follows TP=1 within bf16's tolerance (2e-2), and repeats its bits" {
	need_gpu
	A=("${TINY[@]}" "${LLAMA[@]}" --bf16 --train-iters 10)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${A[@]}" --tensor-model-parallel-size 2 --sequence-parallel --log-json a.jsonl --save A
	mpiexec -n 2 mt-train "${A[@]}" --tensor-model-parallel-size 2 --sequence-parallel --log-json b.jsonl --save B
	close a.jsonl one.jsonl 2e-2
	diff <(fields a.jsonl) <(fields b.jsonl)
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
}

# bats test_tags=gpu
@test "gpu: a TP=2 checkpoint of the GPU resumes on the CPU at TP=1 and continues like the GPU run" {
	need_gpu
	A=("${TINY[@]}" "${LLAMA[@]}" --train-iters 7)
	mpiexec -n 2 mt-train "${A[@]}" --tensor-model-parallel-size 2 --save-interval 5 --save G --log-json g.jsonl
	rm -rf C && mkdir C && cp -R G/iter_0000005 C/ && echo 5 > C/latest
	mt-train "${A[@]}" --device cpu --load C --save C --log-json c.jsonl
	tail -2 g.jsonl > want.jsonl
	close c.jsonl want.jsonl 1e-4
}

# bats test_tags=gpu
@test "gpu: TP=2 with fp16 loss scaling and with full recompute follows TP=1 (found-inf agreed by the group)" {
	need_gpu
	A=("${TINY[@]}" "${LLAMA[@]}" --fp16 --initial-loss-scale 4096 --train-iters 10)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${A[@]}" --tensor-model-parallel-size 2 --sequence-parallel --log-json tp.jsonl
	close tp.jsonl one.jsonl 2e-2
	A=("${TINY[@]}" "${LLAMA[@]}" --train-iters 6 --recompute-granularity full)
	mt-train "${A[@]}" --log-json rone.jsonl
	mpiexec -n 2 mt-train "${A[@]}" --tensor-model-parallel-size 2 --sequence-parallel --log-json rtp.jsonl
	close rtp.jsonl rone.jsonl 1e-4
}

# bats test_tags=gpu
@test "gpu: two tensor-parallel ranks on one GPU go through host memory by default; --tensor-parallel-comm nccl is refused there" {
	need_gpu
	[ "$(nvidia-smi -L | wc -l)" -eq 1 ] || skip "several GPUs: the ranks get one each"
	V=("${TINY[@]:0:${#TINY[@]}-1}") # without -q: the note is wanted
	[ "${TINY[-1]}" = -q ]
	run -0 --separate-stderr mpiexec -n 2 mt-train "${V[@]}" --train-iters 1 --tensor-model-parallel-size 2
	[[ $stderr == *"share a GPU: their collectives go through host memory"* ]] || { echo "$stderr"; false; }
	run -2 --separate-stderr mpiexec -n 2 mt-train "${TINY[@]}" --train-iters 1 --tensor-model-parallel-size 2 \
		--tensor-parallel-comm nccl
	[[ $stderr == *"--tensor-parallel-comm nccl: ranks of a tensor-parallel group share GPU"* ]] || { echo "$stderr"; false; }
}
