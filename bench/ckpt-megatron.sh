#!/bin/sh
# bench/ckpt-megatron.sh: mt-ckpt-reshard's Megatron-LM export and import of a 1B-class model,
# in both of Megatron's formats (torch_dist, the default, and the legacy torch files), against
# the disk: `cp -r` of the same files in the same run (a read and a write of the same bytes,
# as an export or import reads one format and writes the other). Prints GB/s (of Megatron's
# files) and the ratio to cp's.
#
#   bench/ckpt-megatron.sh                   # Llama-style 0.93B (16 x 2048, GQA 16/4, SwiGLU 5632), bf16 files
#   LAYERS=4 bench/ckpt-megatron.sh          # smaller
#   CKPT_BENCH_DIR=/scratch bench/ckpt-megatron.sh
#
# The mt checkpoint it starts from is a Hugging Face Llama of random bf16 weights (written with
# numpy, imported with mt-ckpt-reshard import --format hf-llama): about 8 bytes a parameter of
# memory at most, 4 bytes a parameter of disk, plus 2 for each Megatron copy (and its cp).
#
# Env: BUILD (build), CKPT_BENCH_DIR (default $TMPDIR, else /tmp), LAYERS HIDDEN HEADS QGROUPS
# FFN VOCAB (16 2048 16 4 5632 32000), TP PP (the Megatron layout written: 2 2).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/bin
LAYERS=${LAYERS:-16} HIDDEN=${HIDDEN:-2048} HEADS=${HEADS:-16} QGROUPS=${QGROUPS:-4} FFN=${FFN:-5632}
VOCAB=${VOCAB:-32000} TP=${TP:-2} PP=${PP:-2}
W=$(mktemp -d "${CKPT_BENCH_DIR:-${TMPDIR:-/tmp}}/mt-ckpt-megatron.XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
bytes() { du -sb "$1" | cut -f1; }
rate() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1e9 / float(sys.argv[2]):.2f}')" "$1" "$2"; }

echo "model: Llama-style, $LAYERS layers, hidden $HIDDEN, heads $HEADS/$QGROUPS, ffn $FFN, vocabulary $VOCAB; Megatron layout TP $TP x PP $PP, bf16"
t0=$(now)
# a Hugging Face Llama of random bf16 weights (numpy; tests/reference/hf_safetensors.py), imported
/usr/bin/python3 - "$W/hf" "$LAYERS" "$HIDDEN" "$HEADS" "$QGROUPS" "$FFN" "$VOCAB" <<'PY'
import json, os, sys
import numpy as np
sys.path.insert(0, "tests/reference")
from hf_safetensors import write_file
d, L, h, a, g, f, V = sys.argv[1], *map(int, sys.argv[2:])
os.makedirs(d)
hd = h // a
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": L, "hidden_size": h,
           "num_attention_heads": a, "num_key_value_heads": g, "intermediate_size": f, "vocab_size": V,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16"}, open(os.path.join(d, "config.json"), "w"))
rng = np.random.default_rng(1)
def shapes():
    yield "model.embed_tokens.weight", (V, h)
    for i in range(L):
        p = "model.layers.%d." % i
        yield p + "input_layernorm.weight", (h,)
        yield p + "self_attn.q_proj.weight", (a * hd, h)
        yield p + "self_attn.k_proj.weight", (g * hd, h)
        yield p + "self_attn.v_proj.weight", (g * hd, h)
        yield p + "self_attn.o_proj.weight", (h, a * hd)
        yield p + "post_attention_layernorm.weight", (h,)
        yield p + "mlp.gate_proj.weight", (f, h)
        yield p + "mlp.up_proj.weight", (f, h)
        yield p + "mlp.down_proj.weight", (h, f)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (V, h)
write_file(os.path.join(d, "model.safetensors"),
           ((n, rng.standard_normal(s, dtype=np.float32) * 0.02) for n, s in shapes()), "BF16", {"format": "pt"})
PY
"$BIN/mt-ckpt-reshard" import -q --format hf-llama "$W/hf" "$W/mt"
rm -rf "$W/hf"
echo "mt checkpoint: $(bytes "$W/mt") bytes, made in $(secs "$t0" "$(now)") s"
sync

run() { # NAME COMMAND...: time it, print seconds
	name=$1
	shift
	sync
	t0=$(now)
	"$@"
	sync
	s=$(secs "$t0" "$(now)")
	echo "$s"
}

for fmt in torch_dist torch; do
	s=$(run export "$BIN/mt-ckpt-reshard" export -q --format megatron --ckpt-format "$fmt" --dtype bf16 \
		--target-tensor-parallel-size "$TP" --target-pipeline-parallel-size "$PP" "$W/mt" "$W/meg-$fmt")
	n=$(bytes "$W/meg-$fmt")
	c=$(run cp cp -r "$W/meg-$fmt" "$W/copy-$fmt")
	rm -rf "$W/copy-$fmt"
	echo "export $fmt: $n bytes in $s s, $(rate "$n" "$s") GB/s; cp -r of the same files $c s, $(rate "$n" "$c") GB/s; ratio to cp $(python3 -c "print(f'{$c / $s:.2f}')")"
	s=$(run import "$BIN/mt-ckpt-reshard" import -q --format megatron --no-load-optim "$W/meg-$fmt" "$W/back-$fmt")
	echo "import $fmt: $n bytes in $s s, $(rate "$n" "$s") GB/s; ratio to cp $(python3 -c "print(f'{$c / $s:.2f}')")"
	rm -rf "$W/back-$fmt" "$W/meg-$fmt"
done
