#!/usr/bin/env bats
# mt-ckpt-reshard import/export --format megatron against checkpoints that Megatron-LM wrote
# itself: shared/fixtures/megatron-core_v0.12.3 (GPT-2 and Llama style, TP1PP1 and TP2PP2,
# written by core_v0.12.3's own save_checkpoint, with the rerun state machine's enums and
# everything else that release pickles), and their ground truth source.npz. Imports are
# checked bit for bit against source.npz at every layout mt rewrites them to; exports with
# the legacy model's names against Megatron's own files, name for name and bit for bit.
# tests/reference/megatron_real.py reads torch.save files without torch (zipfile and a
# restricted unpickler), mt's HDF5 with h5py, source.npz with numpy.
load helpers
cpu_only

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
REAL() { $PY "$MT_ROOT/tests/reference/megatron_real.py" "$@"; }
FIX=$MT_ROOT/../shared/fixtures/megatron-core_v0.12.3

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	[ -f "$FIX/README.md" ] || { echo "the fixtures are missing: $FIX" >&2; return 1; }
	$PY -c 'import h5py, numpy' || { echo "/usr/bin/python3 lacks h5py or numpy (scripts/install-deps.sh)" >&2; return 1; }
	for m in gpt2 llama; do
		for l in tp1pp1 tp2pp2; do
			mt-ckpt-reshard import --format megatron "$FIX/$m/$l" "$m-$l" 2> "$m-$l.log"
		done
	done
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

@test "import: Megatron-LM core_v0.12.3's own files (GPT-2, Llama; TP1PP1, TP2PP2) give source.npz's tensors bit for bit, iteration 100 and args' sizes" {
	# the files hold what made the import refuse them before: the rerun state machine's enums
	run -0 REAL top "$FIX/gpt2/tp1pp1/iter_0000100/mp_rank_00/model_optim_rng.pt"
	[ "$output" = "args checkpoint_version iteration model rerun_state_machine num_floating_point_operations_so_far 100 3.0" ]
	run -0 grep -c "megatron.core.rerun_state_machine" "$FIX/gpt2/tp1pp1/iter_0000100/mp_rank_00/model_optim_rng.pt"
	for m in gpt2 llama; do
		for l in "tp1pp1 1 1 1" "tp2pp2 2 2 4"; do
			set -- $l
			cat "$F/$m-$1.log"
			[[ $(cat "$F/$m-$1.log") == *"imported $FIX/$m/$1 (TP $2 x PP $3, $4 files, legacy-model names; 4 layers, hidden 64, padded vocabulary 1024) into $m-$1 at iteration 100, weights only"* ]]
			run -0 REAL check "$F/$m-$1" "$FIX/$m/source.npz" --style $m
			echo "$m $1: $output"
			[ "$output" = "$([ $m = gpt2 ] && echo 52 || echo 27) tensors bit-exact to source.npz" ]
			run -0 mt-ckpt-reshard inspect --json "$F/$m-$1"
			[[ $output == *'"iteration": 100'* ]]
			[[ $output == *'"consumed_train_samples": 3200'* ]]
		done
	done
	run -0 --separate-stderr mt-ckpt-reshard inspect --json "$F/llama-tp2pp2"
	[[ $output == *'"num-query-groups": 2'* && $output == *'"swiglu": true'* && $output == *'"normalization": "RMSNorm"'* ]]
	[[ $output == *'"tensor_model_parallel_size": 2'* && $output == *'"names": "legacy"'* ]]
}

@test "layouts: each import rewritten to TP1PP1, TP2PP2, TP2PP1 and TP1PP2 holds source.npz's tensors, every rank's part Megatron's slice" {
	for m in gpt2 llama; do
		for src in tp1pp1 tp2pp2; do
			for l in "1 1" "2 2" "2 1" "1 2"; do
				set -- $l
				mt-ckpt-reshard -q --load "$F/$m-$src" --save "$m-$src-$1$2" --target-tensor-parallel-size $1 \
					--target-pipeline-parallel-size $2
				run -0 REAL check "$m-$src-$1$2" "$FIX/$m/source.npz" --style $m --tp $1 --pp $2
				echo "$m from $src at TP $1 x PP $2: $output"
				[[ $output == *"tensors bit-exact to source.npz, every rank's slice in place" ]]
			done
		done
	done
}

@test "the checks can fail: one bit of one tensor, a rank's slice swapped, another model's sizes" {
	$PY - "$FIX/llama/source.npz" flipped.npz <<'PY'
import sys, numpy as np
d = dict(np.load(sys.argv[1]))
k = "language_model.encoder.layers.2.mlp.dense_h_to_4h.weight"
b = d[k].view(np.uint32)
b[100, 3] ^= 1 << 16
np.savez(sys.argv[2], **d)
PY
	run -1 REAL check "$F/llama-tp2pp2" flipped.npz --style llama
	[[ $output == *"decoder.layers.2.mlp.linear_fc1.weight"*"differs from source.npz"* ]]
	run -1 REAL check "$F/llama-tp2pp2" "$FIX/llama/source.npz" --style gpt2
	[[ $output == *"config"* ]]
	# rank 1's part of a SwiGLU fc1 holding rank 0's rows: the index still reads, the slice check fails
	mt-ckpt-reshard -q --load "$F/llama-tp1pp1" --save s --target-tensor-parallel-size 2 --target-pipeline-parallel-size 1
	$PY - s/iter_0000100 <<'PY'
import sys, h5py
d = sys.argv[1]
a = h5py.File(d + "/model-tp00-pp000-dp0000.h5", "r")["model/decoder.layers.1.mlp.linear_fc1.weight"][()]
with h5py.File(d + "/model-tp01-pp000-dp0000.h5", "r+") as f:
    f["model/decoder.layers.1.mlp.linear_fc1.weight"][...] = a
PY
	run -1 REAL check s "$FIX/llama/source.npz" --style llama --tp 2 --pp 1
	[[ $output == *"linear_fc1.weight"* ]]
}

@test "export --megatron-names legacy: Megatron's own files' names, nesting, shapes and bf16 bits at TP1PP1 and TP2PP2; importing them gives the same tensors" {
	for m in gpt2 llama; do
		for l in "tp1pp1 1 1" "tp2pp2 2 2"; do
			set -- $l
			run -0 --separate-stderr mt-ckpt-reshard export --format megatron --megatron-names legacy --dtype bf16 \
				--target-tensor-parallel-size $2 --target-pipeline-parallel-size $3 "$F/$m-tp1pp1" "$m-$1"
			[[ $stderr == *"legacy-model names; load it in Megatron with --ckpt-format torch --use-legacy-models"* ]]
			[ "$(cat "$m-$1/latest_checkpointed_iteration.txt")" = 100 ]
			n=0
			for f in "$FIX/$m/$1"/iter_0000100/mp_rank_*/model_optim_rng.pt; do
				r=${f#"$FIX/$m/$1/"}
				REAL keys --values "$f" > want
				REAL keys --values "$m-$1/$r" > got
				diff want got
				n=$((n + 1))
			done
			[ "$n" -eq "$(find "$m-$1" -name model_optim_rng.pt | wc -l)" ]
			mt-ckpt-reshard import -q --format megatron "$m-$1" "back-$m-$1"
			run -0 REAL check "back-$m-$1" "$FIX/$m/source.npz" --style $m
			run -0 REAL same-source "back-$m-$1" "$F/$m-tp1pp1"
		done
	done
	# torch.load with only the weights_only globals plus argparse.Namespace (Megatron's safe loading)
	# reads them (where Debian's python3-torch is installed, as for mt-ckpt-reshard-megatron.bats)
	if $PY -c 'import torch' 2>/dev/null; then
		run -0 $PY -c '
import sys, glob, torch
sys.path.insert(0, "'"$MT_ROOT"'/tests/reference")
import megatron_ckpt as m
for f in sorted(glob.glob("*-tp2pp2/iter_0000100/*/model_optim_rng.pt")):
    sd = torch.load(f, pickle_module=m.safe_pickle)
    print(f, sorted(sd["model"]), sd["args"].use_legacy_models, sd["args"].vocab_size)'
		echo "$output"
		[ "${#lines[@]}" -eq 8 ]
		[ "${lines[1]}" = "gpt2-tp2pp2/iter_0000100/mp_rank_00_001/model_optim_rng.pt ['language_model', 'word_embeddings_for_head'] True 1000" ]
	fi
	# what the names are: nested under language_model, the layers numbered from 0 on each stage
	run -0 REAL keys llama-tp2pp2/iter_0000100/mp_rank_01_001/model_optim_rng.pt
	[[ ${lines[0]} == "model{dict}.language_model{dict}.encoder{OrderedDict}.layers.0.input_norm.weight bfloat16 [64]" ]]
	[[ $output == *"language_model{dict}.output_layer{OrderedDict}.weight bfloat16 [512, 64]"* ]]
	run -0 REAL keys gpt2-tp2pp2/iter_0000100/mp_rank_00_001/model_optim_rng.pt
	[[ ${lines[-1]} == "model{dict}.word_embeddings_for_head{OrderedDict}.weight bfloat16 [512, 64]" ]]
	# the default stays megatron-core's names
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 "$F/gpt2-tp1pp1" core
	run -0 REAL keys core/iter_0000100/mp_rank_00/model_optim_rng.pt
	[[ ${lines[0]} == "model{OrderedDict}.embedding.word_embeddings.weight float32 [512, 64]" ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --megatron-names old "$F/gpt2-tp1pp1" bad
	[[ $stderr == *"--megatron-names: 'old' is not core or legacy"* ]]
	run -2 --separate-stderr mt-ckpt-reshard import --format megatron --megatron-names legacy "$FIX/gpt2/tp1pp1" bad
	[[ $stderr == *"--megatron-names are export options"* ]]
	[ ! -e bad ]
}

@test "export refuses (exit 2, nothing written) TP sizes Megatron would not load: query groups, heads, ffn" {
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --target-tensor-parallel-size 4 "$F/llama-tp1pp1" q
	[[ $stderr == *"--target-tensor-parallel-size 4 does not divide the 2 query groups"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --megatron-names legacy \
		--target-tensor-parallel-size 8 "$F/gpt2-tp1pp1" q
	[[ $stderr == *"--target-tensor-parallel-size 8 does not divide the 4 attention heads"* ]]
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --target-pipeline-parallel-size 3 "$F/gpt2-tp1pp1" q
	[[ $stderr == *"does not divide the 4 layers"* ]]
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --ffn-hidden-size 66 --tokenizer-type NullTokenizer \
		--vocab-size 200 --mock-data --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --save f66
	run -2 --separate-stderr mt-ckpt-reshard export --format megatron --target-tensor-parallel-size 4 f66 q
	[[ $stderr == *"--target-tensor-parallel-size 4 does not divide --ffn-hidden-size 66"* ]]
	[ -z "$(ls -A | grep '^q')" ]
	# the sizes that divide are written
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 f66 ok2
	mt-ckpt-reshard export -q --format megatron --target-tensor-parallel-size 2 "$F/llama-tp1pp1" okq
}

@test "distrib_optim.pt beside Megatron's file: refused naming it and --no-load-optim; the weights import without it" {
	cp -r "$FIX/gpt2/tp2pp2" d
	chmod -R u+w d
	: > d/iter_0000100/mp_rank_01_001/distrib_optim.pt
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron d x
	[[ $stderr == *"'d/iter_0000100/mp_rank_01_001/distrib_optim.pt': the distributed optimizer's state is not read"*"--no-load-optim"* ]]
	[ ! -e x/latest ]
	mt-ckpt-reshard import -q --format megatron --no-load-optim d x
	run -0 REAL check x "$FIX/gpt2/source.npz" --style gpt2
}

@test "hostile: a state dict nested 100,000 deep (dicts, lists) or holding itself exits 3 naming the file and what is too deep, no signal" {
	REAL hostile deep-dict deep-dict
	REAL hostile deep-list deep-list
	REAL hostile cycle cycle
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron deep-dict x
	[[ $stderr == *"'deep-dict/iter_0000100/mp_rank_00/model_optim_rng.pt' data.pkl byte "*": dicts nested more than 100 deep: refused"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron deep-list x
	[[ $stderr == *"'deep-list/iter_0000100/mp_rank_00/model_optim_rng.pt' data.pkl byte "*": lists nested more than 100 deep: refused"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron cycle x
	[[ $stderr == *"'cycle/iter_0000100/mp_rank_00/model_optim_rng.pt': the model's state dict is nested more than 32 deep (at 'language_model.a.a."* ]]
	[ ! -e x ]
	# 30 levels: read, then refused for what it is (not a tensor of a GPT model), not for its depth
	REAL hostile d30 deep-dict --depth 30
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron d30 x
	[[ $stderr == *"'language_model.a.a."*"is not a tensor of a GPT model mt knows"* ]]
}

@test "checkpoint_version: none saved (0 to Megatron) or older than 2.0 and newer than 3.0 are refused, exit 3" {
	REAL hostile none version --ckpt-version none
	REAL hostile old version --ckpt-version 1.0
	REAL hostile new version --ckpt-version 4.0
	REAL hostile ok version --ckpt-version 3.0
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron none x
	[[ $stderr == *"'none/iter_0000100/mp_rank_00/model_optim_rng.pt': checkpoint_version 0 (none saved, which Megatron reads as 0): files older than 2.0"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron old x
	[[ $stderr == *"checkpoint_version 1: files older than 2.0"* ]]
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron new x
	[[ $stderr == *"checkpoint_version 4 is newer than any Megatron-LM release writes (3.0): refused"* ]]
	# 3.0 passes that check (and stops at the empty model)
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron ok x
	[[ $stderr == *"no tensor for mt's embedding.word_embeddings.weight"* ]]
	[ ! -e x ]
}

@test "every global of megatron-dist-ckpt.md 1.3, where Megatron puts it, is read; a Transformer Engine FP8 tensor class is refused by name" {
	run -0 REAL all-globals "$FIX/gpt2/tp1pp1" all
	for g in "argparse Namespace" "collections OrderedDict" "torch._utils _rebuild_tensor_v2" "torch BFloat16Storage" \
		"torch ByteStorage" "torch._tensor _rebuild_from_type_v2" "torch Tensor" "torch._utils _rebuild_parameter" \
		"torch bfloat16" "torch float32" "numpy.core.multiarray _reconstruct" "numpy ndarray" "numpy dtype" \
		"_codecs encode" "torch._C Generator" "torch device" "megatron.core.enums ModelType" \
		"megatron.core.transformer.enums AttnBackend" "megatron.core.transformer.enums CudaGraphModule" \
		"megatron.core.transformer.enums InferenceCudaGraphScope" "megatron.core.transformer.enums CudaGraphScope" \
		"signal Signals" "megatron.core.rerun_state_machine RerunMode" "megatron.core.rerun_state_machine RerunState" \
		"megatron.core.rerun_state_machine RerunDiagnostic" "megatron.core.rerun_state_machine Call" \
		"megatron.core.rerun_state_machine Caller" "_io BytesIO" "pathlib PosixPath" "types SimpleNamespace" \
		"megatron.core.optimizer.optimizer_config OptimizerConfig"; do
		grep -qx "$g" <<< "$output" || { echo "the file lacks GLOBAL $g"; false; }
	done
	run -0 --separate-stderr mt-ckpt-reshard import --format megatron --no-load-optim all ck
	run -0 REAL check ck "$FIX/gpt2/source.npz" --style gpt2
	REAL all-globals "$FIX/gpt2/tp1pp1" foreign --foreign
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron --no-load-optim foreign x
	[[ $stderr == *"'foreign/iter_0000100/mp_rank_00/model_optim_rng.pt' data.pkl byte "*": global 'transformer_engine.pytorch.float8_tensor.Float8Tensor' is not in the list of globals read (pickle.h): refused"* ]]
	[ ! -e x ]
}
