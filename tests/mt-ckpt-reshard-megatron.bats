#!/usr/bin/env bats
# mt-ckpt-reshard import/export --format megatron: Megatron-LM's legacy checkpoints
# (--ckpt-format torch), against fixtures that an independent script writes with torch.save
# from Megatron's key names and layouts (tests/reference/megatron_ckpt.py, Debian's
# python3-torch), and exports that the same script loads with torch.load through an
# unpickler that allows only torch's weights_only globals plus argparse.Namespace.
load helpers
cpu_only

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
MEG() { $PY "$MT_ROOT/tests/reference/megatron_ckpt.py" "$@"; }

setup_file() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null || return 0
	cd "$BATS_FILE_TMPDIR"
	# one logical model each, at TP=2 x PP=2 and TP=1 x PP=1, with optimizer state
	MEG write g22 --style gpt2 --tp 2 --pp 2 --optimizer
	MEG write g11 --style gpt2 --tp 1 --pp 1 --optimizer
	MEG write l22 --style llama --tp 2 --pp 2 --optimizer --dtype fp32
	MEG write l11 --style llama --tp 1 --pp 1 --optimizer --dtype fp32
	# mt-trained models to export: GPT-2 style with a BPE vocabulary of 300 (padded to 304,
	# which TP 2 pads alike), Llama style with 96 ids
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 100 > corpus.jsonl
	mt-tokenize train -q --input corpus.jsonl --vocab-size 300 --output-prefix tok
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --mock-data --tokenizer-type GPT2BPETokenizer \
		--vocab-file "$PWD/tok-vocab.json" --merge-file "$PWD/tok-merges.txt" --micro-batch-size 2 \
		--global-batch-size 2 --train-iters 3 --lr 1e-2 --save gpt2
	mt-train -q --config "$MT_ROOT/share/configs/llama-tiny.conf" --mock-data --vocab-size 95 \
		--micro-batch-size 2 --global-batch-size 2 --train-iters 3 --lr 1e-2 --save llama
}

setup() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null ||
		skip "/usr/bin/python3 lacks torch or h5py (scripts/install-deps.sh installs them)"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

@test "import: a TP=2 x PP=2 Megatron checkpoint gives the logical tensors of its TP=1 equivalent, optimizer included (GPT-2 style, bf16)" {
	run -0 --separate-stderr mt-ckpt-reshard import --format megatron "$F/g22" a
	[[ $stderr == *"imported $F/g22 (TP 2 x PP 2, 4 files, megatron-core names; 4 layers, hidden 64, padded vocabulary 256) into a at iteration 500, with the optimizer state"* ]]
	mt-ckpt-reshard import -q --format megatron "$F/g11" b
	run -0 MEG same a b --optimizer
	[ "$output" = "156 tensors identical" ]
	# and those are the script's logical model: fp32 masters as weights, Adam's moments and step
	run -0 MEG check-import a --style gpt2 --optimizer
	echo "$output"
	run -0 mt-ckpt-reshard inspect --json a
	[[ $output == *'"iteration": 500'* ]]
	[[ $output == *'"consumed_train_samples": 8000'* ]]
	[[ $output == *'"optimizer_step": 7'* ]]
	[[ $output == *'"padded-vocab-size": 256'* ]]
	[[ $output == *'"format": "megatron"'* ]]
}

@test "import: Llama style (RoPE, RMSNorm, SwiGLU halves, GQA, untied, fp32) at TP=2 x PP=2 equals TP=1" {
	mt-ckpt-reshard import -q --format megatron "$F/l22" a
	mt-ckpt-reshard import -q --format megatron "$F/l11" b
	run -0 MEG same a b --optimizer
	[ "$output" = "81 tensors identical" ]
	run -0 MEG check-import a --style llama --dtype fp32 --optimizer
	echo "$output"
}

@test "import: legacy-model and Transformer Engine names, fp16, virtual stages, fewer query groups than TP ranks" {
	MEG write leg --style llama --tp 2 --pp 2 --names legacy --dtype fp16 --optimizer
	run -0 --separate-stderr mt-ckpt-reshard import --format megatron leg a
	[[ $stderr == *"legacy-model names"* ]]
	run -0 MEG check-import a --style llama --dtype fp16 --optimizer
	MEG write te --style gpt2 --tp 2 --pp 1 --names te
	mt-ckpt-reshard import -q --format megatron te b
	run -0 MEG check-import b --style gpt2
	MEG write vp --style gpt2 --tp 1 --pp 2 --vp 2 --optimizer
	mt-ckpt-reshard import -q --format megatron vp/iter_0000500 c   # an iteration directory too
	run -0 MEG check-import c --style gpt2 --optimizer
	MEG write g1 --style llama --kv-heads 1 --tp 2 --pp 1
	mt-ckpt-reshard import -q --format megatron g1 d
	run -0 MEG check-import d --style llama --kv-heads 1
	# the weights only, on request
	mt-ckpt-reshard import -q --format megatron --no-load-optim --iteration 3 "$F/g22" e
	run -0 MEG check-import e --style gpt2
	[ "$(cat e/latest)" = 3 ]
}

@test "export: the files load with torch.load (safe globals only) and hold each rank's shapes and values" {
	run -0 --separate-stderr mt-ckpt-reshard export --format megatron --target-tensor-parallel-size 2 \
		--target-pipeline-parallel-size 2 "$F/gpt2" out
	[[ $stderr == *"TP 2 x PP 2, 4 files, float32, padded vocabulary 304"*"--no-load-optim --no-load-rng"* ]]
	[ "$(cat out/latest_checkpointed_iteration.txt)" = 3 ]
	run -0 MEG check-export out --ckpt "$F/gpt2" --tp 2 --pp 2
	[ "$output" = "4 files, 28 tensors: shapes per rank and values as expected" ]
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 --dtype bf16 "$F/llama" l
	run -0 MEG check-export l --ckpt "$F/llama" --tp 2 --pp 1 --dtype bf16
	echo "$output"
	# Megatron pads the vocabulary for TP 4 past mt's 304 rows: copies of the last real row
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 4 "$F/gpt2" t4
	run -0 MEG check-export t4 --ckpt "$F/gpt2" --tp 4 --pp 1
	run -0 $PY -c '
import sys, types, pickle, torch
sys.path.insert(0, "'"$MT_ROOT"'/tests/reference")
import megatron_ckpt as m
w = torch.cat([torch.load("t4/iter_0000003/mp_rank_%02d/model_optim_rng.pt" % r, pickle_module=m.safe_pickle)
              ["model"]["embedding.word_embeddings.weight"] for r in range(4)])
a = torch.load("t4/iter_0000003/mp_rank_00/model_optim_rng.pt", pickle_module=m.safe_pickle)["args"]
print(tuple(w.shape), a.padded_vocab_size, bool((w[304:] == w[299]).all()), a.tokenizer_type)'
	[ "$output" = "(320, 64) 320 True GPT2BPETokenizer" ]
}

@test "export then import round-trips bit for bit, and exporting the import again gives the same files" {
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
		"$F/gpt2" g
	mt-ckpt-reshard import -q --format megatron --vocab-size 300 g gck
	run -0 MEG same "$F/gpt2" gck
	[ "$output" = "28 tensors identical" ]
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
		gck g2
	for f in g/iter_0000003/mp_rank_*/model_optim_rng.pt; do cmp "$f" "g2/${f#g/}"; done
	# Llama style, through TP 2 x PP 2 and back
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 \
		"$F/llama" l
	mt-ckpt-reshard import -q --format megatron --vocab-size 95 l lck
	run -0 MEG same "$F/llama" lck
	[ "$output" = "15 tensors identical" ]
	# a Megatron checkpoint through mt and back: the same tensors at the same layout
	mt-ckpt-reshard import -q --format megatron "$F/l22" a
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 a m
	mt-ckpt-reshard import -q --format megatron --no-load-optim m b
	run -0 MEG same a b
	[ "$output" = "27 tensors identical" ]
}

@test "an imported checkpoint trains with mt-train --load" {
	mt-ckpt-reshard import -q --format megatron --vocab-size 250 "$F/l22" ck
	run -0 --separate-stderr mt-train --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention \
		--num-query-groups 2 --ffn-hidden-size 160 --seq-length 32 --max-position-embeddings 32 \
		--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear \
		--untie-embeddings-and-output-weights --make-vocab-size-divisible-by 8 --mock-data --vocab-size 250 \
		--micro-batch-size 2 --global-batch-size 2 --train-iters 503 --lr 1e-4 --load ck --save ck2 --log-interval 1
	[[ $stderr == *"loaded checkpoint 'ck/iter_0000500' at iteration 500"* ]]
	[[ $stderr == *"iteration 503/503 | loss "* ]]
	[ "$(cat ck2/latest)" = 503 ]
}

@test "corrupt and hostile files exit 3 naming the file, and write nothing" {
	for kind in truncate opcode global shape; do
		MEG write $kind --tp 2 --pp 1
		MEG hostile $kind $kind
		run -3 --separate-stderr mt-ckpt-reshard import --format megatron $kind ck-$kind
		echo "$kind: $stderr"
		[[ $stderr == *"'$kind/iter_0000500/mp_rank_00/model_optim_rng.pt'"* ]]
		[ ! -e ck-$kind/latest ]
	done
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron truncate x
	[[ $stderr == *"no end of central directory record (truncated"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron opcode x
	[[ $stderr == *"data.pkl byte "*": pickle opcode 0x69 ('i') is not one torch.save writes: refused"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron global x
	[[ $stderr == *"data.pkl byte "*": global 'posix.system' is not in the list of globals read"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron shape x
	[[ $stderr == *"tensor 'decoder.layers.0.mlp.linear_fc2.weight' has shape [64, 127]; args (TP 2) say [64, 128]"* ]]
	# a CRC check on request catches a flipped byte in a storage
	MEG write crc --tp 1 --pp 1
	$PY -c '
import sys; p = "crc/iter_0000500/mp_rank_00/model_optim_rng.pt"; b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 1; open(p, "wb").write(b)'
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron --check-crc crc x
	[[ $stderr == *"fails its CRC-32 check"* ]]
	# a missing rank folder
	MEG write miss --tp 2 --pp 2
	rm -r miss/iter_0000500/mp_rank_01_001
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron miss x
	[[ $stderr == *"3 mp_rank_* folders where TP 2 x PP 2 need 4"* ]]
}

@test "refusals: torch_dist checkpoints, distrib_optim.pt, occupied targets, sizes that do not split" {
	mkdir -p dist/iter_0000010
	echo 10 > dist/latest_checkpointed_iteration.txt
	touch dist/iter_0000010/__0_0.distcp dist/iter_0000010/common.pt dist/iter_0000010/metadata.json
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron dist x
	[[ $stderr == *"dist/iter_0000010/metadata.json': not readable JSON"* ]]   # torch_dist: torchdist.bats
	MEG write d --tp 1 --pp 1
	cp d/iter_0000500/mp_rank_00/model_optim_rng.pt d/iter_0000500/mp_rank_00/distrib_optim.pt
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron d x
	[[ $stderr == *"distrib_optim.pt"*"--no-load-optim"* ]]
	mt-ckpt-reshard import -q --format megatron --no-load-optim d x
	run -2 --separate-stderr mt-ckpt-reshard import --format megatron d x
	[[ $stderr == *"already holds checkpoints"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --target-tensor-parallel-size 3 "$F/gpt2" y
	[[ $stderr == *"--target-tensor-parallel-size 3 does not divide the 4 attention heads"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --target-pipeline-parallel-size 3 "$F/gpt2" y
	[[ $stderr == *"does not divide the 2 layers"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --dtype fp8 "$F/gpt2" y
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron "$F/gpt2" d
	[[ $stderr == *"exists and is not an empty directory"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format hf-gpt2 --target-tensor-parallel-size 2 "$F/gpt2" y
	[[ $stderr == *"--target-tensor-parallel-size is an option of --format megatron"* ]]
	[ ! -e y ]
}
