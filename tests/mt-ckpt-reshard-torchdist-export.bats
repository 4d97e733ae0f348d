#!/usr/bin/env bats
# mt-ckpt-reshard export --format megatron --ckpt-format torch_dist: Megatron-LM HEAD's
# distributed checkpoint. Each export is read back by tests/reference/torchdist_check.py
# (Python's pickle with the DCP classes stood in, zipfile, torch.load of every chunk at its
# offset, h5py for mt's own tensors) and its layout compared with the checkpoints PyTorch's own
# DCP wrote in Megatron-core's shapes (tests/fixtures/megatron-torch-dist: the same models).
load helpers
cpu_only

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
CHK() { $PY "$MT_ROOT/tests/reference/torchdist_check.py" "$@"; }
FIX=$MT_ROOT/tests/fixtures/megatron-torch-dist

setup_file() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null || return 0
	cd "$BATS_FILE_TMPDIR"
	# the fixtures' two models: GPT-2 style (learned positions, LayerNorm, tied) and Llama
	# style (RoPE, RMSNorm, SwiGLU, GQA 4 heads / 2 groups, untied, no biases); 4 layers,
	# hidden 64, vocabulary 1000 padded to 1024
	mt-train -q --num-layers 4 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 256 --seq-length 32 \
		--max-position-embeddings 32 --vocab-size 1000 --make-vocab-size-divisible-by 128 --mock-data \
		--micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-2 --save gpt2
	mt-train -q --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention \
		--num-query-groups 2 --ffn-hidden-size 192 --seq-length 32 --position-embedding-type rope \
		--normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights \
		--vocab-size 1000 --make-vocab-size-divisible-by 128 --mock-data --micro-batch-size 2 \
		--global-batch-size 2 --train-iters 1 --lr 1e-2 --save llama
	# 1000 rows in mt, which TP 4 pads to 1024
	mt-train -q --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 \
		--vocab-size 1000 --make-vocab-size-divisible-by 8 --mock-data --micro-batch-size 2 --global-batch-size 2 \
		--train-iters 1 --lr 1e-2 --save v1000
}

setup() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null ||
		skip "/usr/bin/python3 lacks torch or h5py (scripts/install-deps.sh installs them)"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

@test "torch_dist export, GPT-2 style at TP1 x PP1: one .distcp, every key, chunk and value; the layout PyTorch's DCP gives" {
	run -0 --separate-stderr mt-ckpt-reshard export --format megatron --ckpt-format torch_dist --dtype bf16 "$F/gpt2" out
	[[ $stderr == *"TP 1 x PP 1, 1 files, bfloat16, padded vocabulary 1024, megatron-core names; load it in Megatron with --ckpt-format torch_dist --no-load-optim --no-load-rng"* ]]
	[ "$(cat out/latest_checkpointed_iteration.txt)" = 1 ]
	run -0 CHK check out "$F/gpt2" --tp 1 --pp 1 --dtype bf16
	[ "$output" = "33 keys, 69 chunks checked" ]
	run -0 CHK layout out "$FIX/gpt2-tp1pp1-m12"
	[ "$output" = "32 model keys, 68 chunks alike" ]
	# the tied output layer is not written
	run -1 grep -c output_layer out/iter_0000001/.metadata
}

@test "torch_dist export, GPT-2 style at TP2 x PP2: a .distcp a rank, TP chunks on axes 0 and 1, layers split by stage" {
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch_dist --target-tensor-parallel-size 2 \
		--target-pipeline-parallel-size 2 --dtype bf16 "$F/gpt2" out
	run -0 CHK check out "$F/gpt2" --tp 2 --pp 2 --dtype bf16
	[ "$output" = "33 keys, 94 chunks checked" ]
	run -0 CHK layout out "$FIX/gpt2-tp2pp2-mh"
	[ "$output" = "32 model keys, 93 chunks alike" ]
	# and a layout is not another's
	run -1 CHK layout out "$FIX/gpt2-tp1pp1-m12"
	[[ $output == *"chunks"*"against"* ]]
}

@test "torch_dist export, Llama style at TP2 x PP1: SwiGLU's fc1 two chunks a rank a layer, GQA's QKV by groups, untied output" {
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch_dist --target-tensor-parallel-size 2 \
		--dtype bf16 "$F/llama" out
	run -0 CHK check out "$F/llama" --tp 2 --pp 1 --dtype bf16
	[ "$output" = "26 keys, 70 chunks checked" ]
	run -0 CHK layout out "$FIX/llama-tp2pp1-m12"
	[ "$output" = "25 model keys, 69 chunks alike" ]
}

@test "torch_dist export, Llama style at TP1 x PP2, and fp32 and fp16 tensors" {
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch_dist --target-pipeline-parallel-size 2 \
		--dtype bf16 "$F/llama" out
	run -0 CHK check out "$F/llama" --tp 1 --pp 2 --dtype bf16
	[ "$output" = "26 keys, 48 chunks checked" ]
	run -0 CHK layout out "$FIX/llama-tp1pp2-mh"
	[ "$output" = "25 model keys, 47 chunks alike" ]
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch_dist --target-pipeline-parallel-size 2 "$F/llama" f32
	run -0 CHK check f32 "$F/llama" --tp 1 --pp 2 --dtype fp32
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch_dist --target-tensor-parallel-size 2 \
		--dtype fp16 "$F/llama" f16
	run -0 CHK check f16 "$F/llama" --tp 2 --pp 1 --dtype fp16
	# the checker sees a wrong dtype
	run -1 CHK check f16 "$F/llama" --tp 2 --pp 1 --dtype bf16
	[[ $output == *"properties"* ]]
}

@test "torch_dist export at TP4 x PP2: Megatron's vocabulary padding past mt's rows, copies of the last real row" {
	run -0 --separate-stderr mt-ckpt-reshard export --format megatron --ckpt-format torch_dist \
		--target-tensor-parallel-size 4 --target-pipeline-parallel-size 2 "$F/v1000" out
	[[ $stderr == *"TP 4 x PP 2, 8 files, float32, padded vocabulary 1024"* ]]
	run -0 CHK check out "$F/v1000" --tp 4 --pp 2
	[ "$output" = "25 keys, 76 chunks checked" ]
}

@test "torch_dist export: metadata.json has Megatron-LM HEAD's two fields, byte for byte; no common.pt, no legacy folders" {
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch_dist --target-tensor-parallel-size 2 "$F/gpt2" out
	printf '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}' > want
	cmp want out/iter_0000001/metadata.json
	cmp "$FIX/gpt2-tp2pp2-mh/iter_0000100/metadata.json" out/iter_0000001/metadata.json
	[ "$(ls -A out/iter_0000001 | tr '\n' ' ')" = ".metadata __0_0.distcp __1_0.distcp metadata.json " ]
	[ "$(ls -A out)" = "$(printf 'iter_0000001\nlatest_checkpointed_iteration.txt')" ]
	# the default is still the legacy format
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 "$F/gpt2" legacy
	[ -f legacy/iter_0000001/mp_rank_01/model_optim_rng.pt ]
	[ ! -e legacy/iter_0000001/metadata.json ]
	mt-ckpt-reshard export -q --format megatron --ckpt-format torch "$F/gpt2" legacy2
	[ -f legacy2/iter_0000001/mp_rank_00/model_optim_rng.pt ]
}

@test "torch_dist export: a TP that does not divide the query groups is refused, nothing written; bad --ckpt-format values" {
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --ckpt-format torch_dist \
		--target-tensor-parallel-size 4 "$F/llama" out
	[[ $stderr == *"--target-tensor-parallel-size 4 does not divide the 2 query groups"* ]]
	[ ! -e out ]
	run -1 sh -c 'ls -A | grep out' # no temporary directory left either
	# so is the legacy format: Megatron gives each tensor-parallel rank whole query groups
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --target-tensor-parallel-size 4 "$F/llama" legacy
	[[ $stderr == *"does not divide the 2 query groups"* ]]
	[ ! -e legacy ]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --ckpt-format zarr "$F/llama" out
	[[ $stderr == *"--ckpt-format: 'zarr' is not torch or torch_dist"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format hf-gpt2 --ckpt-format torch_dist "$F/gpt2" out
	[[ $stderr == *"--ckpt-format is an option of --format megatron"* ]]
	run -2 --separate-stderr mt-ckpt-reshard import --format megatron --ckpt-format torch_dist "$F/gpt2" out
	[ ! -e out ]
}
