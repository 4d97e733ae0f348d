#!/usr/bin/env bats
# mt-ckpt-reshard export/import (Hugging Face): checked against independent PyTorch models
# written from transformers' conventions (tests/reference/hf_*_logits.py, which read the
# safetensors files with their own parser), round trips, refusals and bad input.
load helpers
cpu_only

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
IDS=3,1,4,1,5,9,2,6,5,35,89,79,0,99,42

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	# a GPT-2 style model with a trained GPT-2 BPE vocabulary (vocab 300 padded to 304)
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 200 > corpus.jsonl
	mt-tokenize train -q --input corpus.jsonl --vocab-size 300 --output-prefix tok
	TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$PWD/tok-vocab.json" --merge-file "$PWD/tok-merges.txt")
	mt-tokenize -q --input corpus.jsonl --output-prefix corpus "${TOK[@]}"
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path corpus_text_document "${TOK[@]}" \
		--split 100,0,0 --data-cache-path cache --micro-batch-size 2 --global-batch-size 2 --train-iters 4 \
		--lr 1e-2 --save gpt2
	# a Llama style model: rotary, RMSNorm, SwiGLU, no biases, untied, grouped-query (vocab 100 padded to 104)
	mt-train -q --config "$MT_ROOT/share/configs/llama-tiny.conf" --mock-data --vocab-size 100 \
		--micro-batch-size 2 --global-batch-size 2 --train-iters 4 --lr 1e-2 --save llama
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

@test "export hf-gpt2: weights, config and tokenizer files; the self-check passes; an independent GPT-2 gives mt's log-probabilities" {
	run -0 --separate-stderr mt-ckpt-reshard export --format hf-gpt2 "$F/gpt2" out
	[ -z "$output" ]
	[[ $stderr == *"with the GPT-2 tokenizer files"* ]]
	[[ $stderr == *"checked: the exported weights give the checkpoint's log-probabilities on a 16-token prompt"* ]]
	[ "$(ls out | sort | tr '\n' ' ')" = "config.json generation_config.json merges.txt model.safetensors tokenizer_config.json vocab.json " ]
	cmp out/vocab.json "$F/tok-vocab.json"
	cmp out/merges.txt "$F/tok-merges.txt"
	run -0 $PY -c '
import json
c = json.load(open("out/config.json")); g = json.load(open("out/generation_config.json"))
v = json.load(open("out/vocab.json"))
print(c["vocab_size"], c["mt"]["padded_vocab_size"], c["n_layer"], c["n_embd"], c["activation_function"],
      c["eos_token_id"] == v["<|endoftext|>"] == g["eos_token_id"], json.load(open("out/tokenizer_config.json"))["tokenizer_class"])'
	[ "$output" = "300 304 2 64 gelu_new True GPT2Tokenizer" ]
	# the embedding lost its padding rows; there is no lm_head (tied)
	run -0 $PY -c '
import sys; sys.path.insert(0, "'"$MT_ROOT"'/tests/reference")
import hf_safetensors as st
w = st.read_file("out/model.safetensors")
print(w["transformer.wte.weight"].shape, w["transformer.h.0.attn.c_attn.weight"].shape, "lm_head.weight" in w)'
	[ "$output" = "(300, 64) (64, 192) False" ]
	mt-logprobs "$F/gpt2" --ids "$IDS" -o mt.npy
	run -0 $PY "$MT_ROOT/tests/reference/hf_gpt2_logits.py" compare out --ids "$IDS" --mt mt.npy --tol 1e-4
	echo "$output"
}

@test "export without the recorded tokenizer files warns and writes the model" {
	cp "$F/tok-vocab.json" "$F/tok-merges.txt" .
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --mock-data --tokenizer-type GPT2BPETokenizer \
		--vocab-file "$PWD/tok-vocab.json" --merge-file "$PWD/tok-merges.txt" --micro-batch-size 2 \
		--global-batch-size 2 --train-iters 1 --save ck
	rm tok-vocab.json
	run -0 --separate-stderr mt-ckpt-reshard export --format hf-gpt2 ck out
	[[ $stderr == *"warning: no tokenizer files in the export"*"tok-vocab.json"* ]]
	[ -f out/model.safetensors ]
	[ ! -e out/vocab.json ]
}

@test "export hf-llama: an independent Llama (rotate_half, q/k/v and gate/up split) gives mt's log-probabilities" {
	run -0 --separate-stderr mt-ckpt-reshard export --format hf-llama "$F/llama" out/  # a trailing slash names the same directory
	[[ $stderr == *"checked:"* ]]
	run -0 $PY -c '
import json; c = json.load(open("out/config.json"))
print(c["vocab_size"], c["num_key_value_heads"], c["head_dim"], c["tie_word_embeddings"], c["rope_theta"], c["rms_norm_eps"], c["attention_bias"])'
	[ "$output" = "100 2 16 False 10000.0 1e-05 False" ]
	mt-logprobs "$F/llama" --ids "$IDS" -o mt.npy
	run -0 $PY "$MT_ROOT/tests/reference/hf_llama_logits.py" compare out --ids "$IDS" --mt mt.npy --tol 1e-4
	echo "$output"
}

@test "round trip: export then import gives bit-identical weights; padding rows repeat the last real row" {
	mt-ckpt-reshard export -q --format hf-gpt2 "$F/gpt2" g
	mt-ckpt-reshard export -q --format hf-llama "$F/llama" l
	mt-ckpt-reshard import -q --format hf-gpt2 --make-vocab-size-divisible-by 8 g gck
	mt-ckpt-reshard import -q --format hf-llama --make-vocab-size-divisible-by 8 --iteration 7 l lck
	[ -d lck/iter_0000007 ]
	[ "$(cat lck/latest)" = 7 ]
	cmp gck/tokenizer/vocab.json "$F/tok-vocab.json"
	cat > same.py <<-'PYEOF'
	import glob, json, sys
	import h5py, numpy as np
	def load(d):
	    f = h5py.File(sorted(glob.glob(d + "/iter_*/model.h5"))[-1], "r")
	    return f, json.loads(f.attrs["config"] if "config" in f.attrs else "{}")
	a, _ = load(sys.argv[1]); b, _ = load(sys.argv[2]); V = int(sys.argv[3])
	na, nb = sorted(a["model"].keys()), sorted(b["model"].keys())
	assert na == nb, (na, nb)
	for k in na:
	    x, y = a["model"][k][()], b["model"][k][()]
	    assert x.shape == y.shape, (k, x.shape, y.shape)
	    if "word_embeddings" in k or "output_layer" in k:
	        assert np.array_equal(x[:V], y[:V]), k
	        assert (y[V:] == y[V - 1]).all(), k
	    else:
	        assert np.array_equal(x, y), k
	print(len(na), "tensors identical")
	PYEOF
	run -0 $PY same.py "$F/gpt2" gck 300
	echo "$output"
	run -0 $PY same.py "$F/llama" lck 100
	echo "$output"
	# and exporting the import again gives the same safetensors file, byte for byte
	mt-ckpt-reshard export -q --format hf-gpt2 gck g2
	cmp g/model.safetensors g2/model.safetensors
}

@test "import: HF-layout files written by the reference (bf16 shards, release names, GQA, biases) give the reference's log-probabilities" {
	R=$MT_ROOT/tests/reference
	$PY $R/hf_gpt2_logits.py random g --release-layout --dtype BF16 --shards 3
	run -0 --separate-stderr mt-ckpt-reshard import --format hf-gpt2 g gck
	[[ $stderr == *"vocabulary 100 padded to 128"* ]]
	mt-logprobs gck --ids "$IDS" -o g.npy
	run -0 $PY $R/hf_gpt2_logits.py compare g --ids "$IDS" --mt g.npy --tol 1e-4
	echo "$output"
	$PY $R/hf_llama_logits.py random l --bias --inv-freq --dtype F16 --shards 2
	mt-ckpt-reshard import -q --format hf-llama l lck
	mt-logprobs lck --ids "$IDS" -o l.npy
	run -0 $PY $R/hf_llama_logits.py compare l --ids "$IDS" --mt l.npy --tol 1e-4
	echo "$output"
	# newer transformers keep rope_theta in rope_parameters
	$PY $R/hf_llama_logits.py random t --tied --kv-heads 1 --theta 500000
	$PY -c 'import json; c = json.load(open("t/config.json")); del c["rope_theta"], c["rope_scaling"]
c["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}; json.dump(c, open("t/config.json", "w"))'
	mt-ckpt-reshard import -q --format hf-llama t tck
	run -0 mt-ckpt-reshard inspect --json tck
	[[ $output == *'"rotary-base": 500000'* ]]
	mt-logprobs tck --ids "$IDS" -o t.npy
	run -0 $PY $R/hf_llama_logits.py compare t --ids "$IDS" --mt t.npy --tol 1e-4
	# the reference can fail: another model's log-probabilities do not pass
	run -1 $PY $R/hf_llama_logits.py compare l --ids "$IDS" --mt t.npy --tol 1e-4
}

@test "an imported checkpoint trains on with mt-train --load" {
	$PY "$MT_ROOT/tests/reference/hf_gpt2_logits.py" random g
	mt-ckpt-reshard import -q --format hf-gpt2 g ck
	run -0 --separate-stderr mt-train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
		--max-position-embeddings 32 --vocab-size 100 --mock-data --micro-batch-size 2 --global-batch-size 2 \
		--train-iters 2 --lr 1e-4 --load ck --save ck --log-interval 1
	[[ $stderr == *"loaded checkpoint"* ]]
	[ "$(cat ck/latest)" = 2 ]
}

@test "the self-check fails loudly on a wrong weight and leaves no output; --no-verify skips it" {
	run -1 --separate-stderr env MT_TEST_HF_EXPORT_CORRUPT=1 mt-ckpt-reshard export --format hf-gpt2 "$F/gpt2" out
	[[ $stderr == *"error: the export does not reproduce the model: log-probability of token"* ]]
	[ ! -e out ]
	[ -z "$(compgen -G 'out.tmp.*')" ]
	run -0 --separate-stderr env MT_TEST_HF_EXPORT_CORRUPT=1 mt-ckpt-reshard export --no-verify --format hf-gpt2 "$F/gpt2" out
	[[ $stderr == *"not checked (--no-verify)"* ]]
	[ -f out/model.safetensors ]
	# an existing output directory is not overwritten
	run -2 --separate-stderr mt-ckpt-reshard export --format hf-gpt2 "$F/gpt2" out
	[[ $stderr == *"'out' exists"* ]]
}

@test "a killed export leaves no output directory, only its temporary one, which the next export removes" {
	$PY "$MT_ROOT/tests/reference/hf_gpt2_logits.py" random big --layers 8 --hidden 512 --heads 8 --ffn 2048 \
		--vocab 8000 --positions 64
	mt-ckpt-reshard import -q --format hf-gpt2 big ck
	mt-ckpt-reshard export -q --format hf-gpt2 ck out &
	pid=$!
	for _ in $(seq 1 1000); do compgen -G 'out.tmp.*' > /dev/null && break; sleep 0.005; done
	kill -KILL "$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 137 ]  # killed, not finished
	[ ! -e out ]
	[ -n "$(compgen -G 'out.tmp.*')" ]
	# the next export to the same place completes and removes what the killed one left,
	# but not the temporary directory of an export that still runs
	sleep 300 &
	live=$!
	mkdir "out.tmp.$live"
	mt-ckpt-reshard export -q --format hf-gpt2 --no-verify ck out
	[ -f out/model.safetensors ]
	[ -d "out.tmp.$live" ]
	kill "$live"
	[ "$(compgen -G 'out.tmp.*')" = "out.tmp.$live" ]
}

@test "refusals: a format that cannot express the model names the option" {
	run -2 --separate-stderr mt-ckpt-reshard export --format hf-gpt2 "$F/llama" out
	[[ $stderr == *"--format hf-gpt2 cannot express this model: it uses --normalization RMSNorm"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format hf-llama "$F/gpt2" out
	[[ $stderr == *"--format hf-llama cannot express this model: it uses --normalization LayerNorm"* ]]
	[ ! -e out ]
	[ -z "$(compgen -G 'out.tmp.*')" ]
	run -2 --separate-stderr mt-ckpt-reshard export "$F/gpt2" out
	[[ $stderr == *"export needs --format"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format hf-t5 "$F/gpt2" out
	[[ $stderr == *"'hf-t5' is not hf-gpt2, hf-llama or megatron"* ]]
}

@test "import of bad input: missing, corrupt, incomplete, mis-shaped, extra tensors, unsupported config" {
	R=$MT_ROOT/tests/reference
	run -4 --separate-stderr mt-ckpt-reshard import --format hf-gpt2 nope ck
	[[ $stderr == *"cannot open 'nope/config.json'"* ]]
	$PY $R/hf_llama_logits.py random l
	cp -r l l2
	head -c 1000 l/model.safetensors > l2/model.safetensors
	run -3 --separate-stderr mt-ckpt-reshard import --format hf-llama l2 ck
	[[ $stderr == *"safetensors file 'l2/model.safetensors'"*"truncated"* ]]
	# a tensor missing, one of another shape, one with no place in the model
	cat > edit.py <<-PYEOF
	import shutil, sys
	sys.path.insert(0, "$R")
	import hf_safetensors as st
	w = st.read_file("l/model.safetensors")
	for d, f in (("miss", lambda w: w.pop("model.layers.1.mlp.up_proj.weight")),
	             ("shape", lambda w: w.__setitem__("model.norm.weight", w["model.norm.weight"][:10])),
	             ("extra", lambda w: w.__setitem__("model.layers.0.mlp.extra.weight", w["model.norm.weight"]))):
	    shutil.copytree("l", d)
	    x = dict(w)
	    f(x)
	    st.write_dir(d, list(x.items()))
	PYEOF
	$PY edit.py
	run -3 --separate-stderr mt-ckpt-reshard import --format hf-llama miss ck
	[[ $stderr == *"no tensor 'model.layers.1.mlp.up_proj.weight' (mt's decoder.layers.1.mlp.linear_fc1.weight)"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format hf-llama shape ck
	[[ $stderr == *"tensor 'model.norm.weight' has shape [10], the config says [64]"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format hf-llama extra ck
	[[ $stderr == *"tensor 'model.layers.0.mlp.extra.weight' has no place in a hf-llama model"* ]]
	# a tied model's stored lm_head must be the embedding
	$PY $R/hf_gpt2_logits.py random g
	cat > lm.py <<-PYEOF
	import shutil, sys
	sys.path.insert(0, "$R")
	import hf_safetensors as st
	w = st.read_file("g/model.safetensors")
	for d, delta in (("same", 0.0), ("differs", 1.0)):
	    shutil.copytree("g", d)
	    st.write_dir(d, list(w.items()) + [("lm_head.weight", w["transformer.wte.weight"] + delta)])
	PYEOF
	$PY lm.py
	run -0 mt-ckpt-reshard import -q --format hf-gpt2 same same-ck
	run -3 --separate-stderr mt-ckpt-reshard import --format hf-gpt2 differs ck
	[[ $stderr == *"tensor 'lm_head.weight' differs from the word embedding"* ]]
	$PY -c 'import json; c = json.load(open("l/config.json")); c["rope_scaling"] = {"type": "linear", "factor": 2.0}; json.dump(c, open("l/config.json", "w"))'
	run -2 --separate-stderr mt-ckpt-reshard import --format hf-llama l ck
	[[ $stderr == *"rope_scaling of type \"linear\" is not supported"* ]]
	run -2 --separate-stderr mt-ckpt-reshard import --format hf-gpt2 l ck
	[[ $stderr == *"model_type \"llama\" is not what --format hf-gpt2 reads"* ]]
	[ ! -e ck ]
	# an existing checkpoint directory is not touched
	run -2 --separate-stderr mt-ckpt-reshard import --format hf-llama miss "$F/llama"
	[[ $stderr == *"already holds checkpoints (latest: iteration 4)"* ]]
}
