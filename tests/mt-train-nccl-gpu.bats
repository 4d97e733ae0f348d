#!/usr/bin/env bats
# Tensor, pipeline and data parallelism over NCCL, each rank on a GPU of its own (the
# transports forced to nccl, so a fallback to host memory fails the test): TP=2 with and
# without sequence parallelism, PP=2 with 1F1B, interleaved and ZB-H1, DP=2 with ZeRO-1,
# against the same model on one GPU. fp32 for 10 steps within 1e-5 (only the order of the
# sums differs), bf16 for 50 steps within 2e-2 (bf16's rounding of activations that were
# summed in another order, compounded over the steps); checkpoints written at one layout
# resume at another. TP=4, PP=4 (1F1B, interleaved, ZB-H1), DP=4, TP=2 x DP=2 and TP=2 x PP=2
# need 4 GPUs, TP x PP x DP with ZeRO-1 8. Every test is tagged gpu and skips with fewer
# GPUs than it needs (CI has none).
load helpers

ngpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 0; }
need_gpus() { [ "$(ngpu)" -ge "$1" ] || skip "fewer than $1 GPUs on this machine"; }

setup() {
	command -v mpiexec >/dev/null || skip "mpiexec not found"
	cd "$BATS_TEST_TMPDIR"
	export OMP_NUM_THREADS=1 NCCL_NVLS_ENABLE=0
	# big enough that the products are tensor-core sized; vocabulary 8000 padded to 8192
	M=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --max-position-embeddings 256
		--vocab-size 8000 --make-vocab-size-divisible-by 256 --mock-data --micro-batch-size 4
		--global-batch-size 16 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 5
		--log-interval 1 --eval-iters 0 --clip-grad 1.0 --distributed-timeout-seconds 120 --device cuda -q)
	LLAMA=(--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear
		--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --ffn-hidden-size 704)
	TPN=(--tensor-model-parallel-size 2 --tensor-parallel-comm nccl)
	PPN=(--pipeline-model-parallel-size 2 --pipeline-parallel-comm nccl)
}

# bats test_tags=gpu
@test "nccl: TP=2 with and without SP (fp32, 10 steps) follows one GPU within 1e-5, GPT-2 and Llama style" {
	need_gpus 2
	for arch in gpt llama; do
		A=("${M[@]}" --train-iters 10)
		[ $arch = llama ] && A+=("${LLAMA[@]}")
		mt-train "${A[@]}" --log-json one-$arch.jsonl
		mpiexec -n 2 mt-train "${A[@]}" "${TPN[@]}" --log-json tp-$arch.jsonl
		close tp-$arch.jsonl one-$arch.jsonl 1e-5
		mpiexec -n 2 mt-train "${A[@]}" "${TPN[@]}" --sequence-parallel --log-json sp-$arch.jsonl
		close sp-$arch.jsonl one-$arch.jsonl 1e-5
	done
}

# bats test_tags=gpu
@test "nccl: TP=2 with SP in bf16 follows one GPU over 50 steps within 2e-2 and repeats its bits" {
	need_gpus 2
	A=("${M[@]}" "${LLAMA[@]}" --bf16 --train-iters 50)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${A[@]}" "${TPN[@]}" --sequence-parallel --log-json a.jsonl --save A
	mpiexec -n 2 mt-train "${A[@]}" "${TPN[@]}" --sequence-parallel --log-json b.jsonl --save B
	close a.jsonl one.jsonl 2e-2
	diff <(fields a.jsonl) <(fields b.jsonl)
	[ "$(ckpt-hash A)" = "$(ckpt-hash B)" ]
}

# bats test_tags=gpu
@test "nccl: PP=2 with 1F1B, interleaved and ZB-H1 over NCCL (fp32) follow one GPU within 1e-5" {
	need_gpus 2
	for arch in gpt llama; do
		A=("${M[@]}" --train-iters 10)
		[ $arch = llama ] && A+=("${LLAMA[@]}")
		mt-train "${A[@]}" --log-json one-$arch.jsonl
		mpiexec -n 2 mt-train "${A[@]}" "${PPN[@]}" --log-json f-$arch.jsonl
		close f-$arch.jsonl one-$arch.jsonl 1e-5
		# interleaved: its receives are posted early, in an order of their own on each stage
		mpiexec -n 2 mt-train "${A[@]}" "${PPN[@]}" --num-layers-per-virtual-pipeline-stage 1 --log-json v-$arch.jsonl
		close v-$arch.jsonl one-$arch.jsonl 1e-5
		mpiexec -n 2 mt-train "${A[@]}" "${PPN[@]}" --pipeline-schedule zb-h1 --log-json z-$arch.jsonl
		diff <(fields f-$arch.jsonl) <(fields z-$arch.jsonl)
	done
}

# bats test_tags=gpu
@test "nccl: PP=2 in bf16 follows one GPU over 50 steps within 2e-2" {
	need_gpus 2
	A=("${M[@]}" --bf16 --train-iters 50)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${A[@]}" "${PPN[@]}" --log-json p.jsonl
	close p.jsonl one.jsonl 2e-2
}

# bats test_tags=gpu
@test "nccl: DP=2 with ZeRO-1 in bf16 follows one GPU over 50 steps within 2e-2" {
	need_gpus 2
	A=("${M[@]}" "${LLAMA[@]}" --bf16 --train-iters 50)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 2 mt-train "${A[@]}" --use-distributed-optimizer --log-json d.jsonl
	close d.jsonl one.jsonl 2e-2
}

# bats test_tags=gpu
@test "nccl: a TP=2 checkpoint resumes at PP=2 and on one GPU, each continuing like the TP=2 run (fp32)" {
	need_gpus 2
	A=("${M[@]}" "${LLAMA[@]}" --train-iters 12)
	mpiexec -n 2 mt-train "${A[@]}" "${TPN[@]}" --save-interval 8 --save T --log-json t.jsonl
	tail -4 t.jsonl > want.jsonl
	for lay in pp one; do
		rm -rf C && mkdir C && cp -R T/iter_0000008 C/ && echo 8 > C/latest
		if [ $lay = pp ]; then
			mpiexec -n 2 mt-train "${A[@]}" "${PPN[@]}" --load C --save C --log-json $lay.jsonl
		else
			mt-train "${A[@]}" --load C --save C --log-json $lay.jsonl
		fi
		close $lay.jsonl want.jsonl 1e-5
	done
}

# bats test_tags=gpu
@test "nccl: TP=2 x PP=2 with SP on four GPUs (bf16, 50 steps) follows one GPU within 2e-2" {
	need_gpus 4
	A=("${M[@]}" "${LLAMA[@]}" --bf16 --train-iters 50)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 4 mt-train "${A[@]}" "${TPN[@]}" "${PPN[@]}" --sequence-parallel --log-json q.jsonl
	close q.jsonl one.jsonl 2e-2
}

# bats test_tags=gpu
@test "nccl: TP=4 with and without SP (fp32, 10 steps) follows one GPU within 1e-5, GPT-2 and Llama style" {
	need_gpus 4
	for arch in gpt llama; do
		A=("${M[@]}" --train-iters 10)
		# four query groups, one a rank
		[ $arch = llama ] && A+=("${LLAMA[@]}" --num-query-groups 4)
		mt-train "${A[@]}" --log-json one-$arch.jsonl
		mpiexec -n 4 mt-train "${A[@]}" --tensor-model-parallel-size 4 --tensor-parallel-comm nccl --log-json tp-$arch.jsonl
		close tp-$arch.jsonl one-$arch.jsonl 1e-5
		mpiexec -n 4 mt-train "${A[@]}" --tensor-model-parallel-size 4 --tensor-parallel-comm nccl --sequence-parallel \
			--log-json sp-$arch.jsonl
		close sp-$arch.jsonl one-$arch.jsonl 1e-5
	done
}

# bats test_tags=gpu
@test "nccl: PP=4 with 1F1B, interleaved and ZB-H1 over NCCL (fp32) follow one GPU within 1e-5" {
	need_gpus 4
	# eight layers: two a stage, so the interleaved schedule has two model chunks a stage
	A=("${M[@]}" "${LLAMA[@]}" --num-layers 8 --train-iters 10)
	P4=(--pipeline-model-parallel-size 4 --pipeline-parallel-comm nccl)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 4 mt-train "${A[@]}" "${P4[@]}" --log-json f.jsonl
	close f.jsonl one.jsonl 1e-5
	mpiexec -n 4 mt-train "${A[@]}" "${P4[@]}" --num-layers-per-virtual-pipeline-stage 1 --log-json v.jsonl
	close v.jsonl one.jsonl 1e-5
	mpiexec -n 4 mt-train "${A[@]}" "${P4[@]}" --pipeline-schedule zb-h1 --log-json z.jsonl
	diff <(fields f.jsonl) <(fields z.jsonl)
	# GPT-2 style: the tied embedding's two copies, on the first and the last of four stages
	A=("${M[@]}" --num-layers 8 --train-iters 10)
	mt-train "${A[@]}" --log-json one-gpt.jsonl
	mpiexec -n 4 mt-train "${A[@]}" "${P4[@]}" --num-layers-per-virtual-pipeline-stage 1 --log-json v-gpt.jsonl
	close v-gpt.jsonl one-gpt.jsonl 1e-5
}

# bats test_tags=gpu
@test "nccl: DP=4 with ZeRO-1 and TP=2 x DP=2 with SP and ZeRO-1 (bf16, 50 steps) follow one GPU within 2e-2" {
	need_gpus 4
	A=("${M[@]}" "${LLAMA[@]}" --bf16 --train-iters 50)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 4 mt-train "${A[@]}" --use-distributed-optimizer --log-json d.jsonl
	close d.jsonl one.jsonl 2e-2
	mpiexec -n 4 mt-train "${A[@]}" "${TPN[@]}" --sequence-parallel --use-distributed-optimizer --log-json td.jsonl
	close td.jsonl one.jsonl 2e-2
}

# bats test_tags=gpu
@test "nccl: a TP=2 x PP=2 checkpoint resumes at TP=4, at PP=4 and on one GPU, each continuing like it (fp32)" {
	need_gpus 4
	A=("${M[@]}" "${LLAMA[@]}" --num-query-groups 4 --train-iters 12)
	mpiexec -n 4 mt-train "${A[@]}" "${TPN[@]}" "${PPN[@]}" --save-interval 8 --save T --log-json t.jsonl
	tail -4 t.jsonl > want.jsonl
	for lay in tp4 pp4 one; do
		rm -rf C && mkdir C && cp -R T/iter_0000008 C/ && echo 8 > C/latest
		case $lay in
		tp4) mpiexec -n 4 mt-train "${A[@]}" --tensor-model-parallel-size 4 --tensor-parallel-comm nccl \
			--load C --save C --log-json $lay.jsonl ;;
		pp4) mpiexec -n 4 mt-train "${A[@]}" --pipeline-model-parallel-size 4 --pipeline-parallel-comm nccl \
			--load C --save C --log-json $lay.jsonl ;;
		one) mt-train "${A[@]}" --load C --save C --log-json $lay.jsonl ;;
		esac
		close $lay.jsonl want.jsonl 1e-5
	done
}

# bats test_tags=gpu
@test "nccl: TP=2 x PP=2 x DP=2 with ZeRO-1 on eight GPUs (bf16, 50 steps) follows one GPU within 2e-2" {
	need_gpus 8
	A=("${M[@]}" "${LLAMA[@]}" --bf16 --train-iters 50)
	mt-train "${A[@]}" --log-json one.jsonl
	mpiexec -n 8 mt-train "${A[@]}" "${TPN[@]}" "${PPN[@]}" --sequence-parallel --use-distributed-optimizer \
		--log-json e.jsonl
	close e.jsonl one.jsonl 2e-2
}
