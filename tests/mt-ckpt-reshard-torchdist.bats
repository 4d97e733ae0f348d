#!/usr/bin/env bats
# mt-ckpt-reshard import --format megatron of Megatron-LM's default torch_dist checkpoints
# (lib/ckpt/torchdist.c), against the folders PyTorch's own distributed checkpoint wrote in
# tests/fixtures/megatron-torch-dist (tests/reference/make-torch-dist.py) from the logical
# tensors of the shared Megatron-written fixtures (source.npz): every tensor mt imports must
# equal source.npz's bit for bit, before and after mt's layout rewrites, and the optimizer
# state must be exp_avg = w/2, exp_avg_sq = w*w as the generator wrote it. The refusals
# edit copies of the fixtures: the .metadata pickle through Python's own pickle with
# stand-in classes (no torch needed), the rest byte by byte.
load helpers
cpu_only

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
FIX=$MT_ROOT/tests/fixtures/megatron-torch-dist
SRC=$MT_ROOT/../shared/fixtures/megatron-core_v0.12.3

setup() {
	$PY -c 'import h5py, numpy' 2>/dev/null || skip "/usr/bin/python3 lacks h5py or numpy (scripts/install-deps.sh)"
	[ -f "$SRC/gpt2/source.npz" ] || skip "no ../shared/fixtures beside the checkout"
	cd "$BATS_TEST_TMPDIR"
}

model_of() { case $1 in gpt2*) echo gpt2 ;; *) echo llama ;; esac; }

# CKPT's logical tensors (its model.h5, a whole file or the index of a sharded one) equal
# source.npz's, bit for bit; with --optim, exp_avg = w/2, exp_avg_sq = w*w and the step 100.
same_as_source() {
	$PY - "$@" <<'PY'
import glob, sys, h5py, numpy as np
ckpt, npz, optim = sys.argv[1], sys.argv[2], "--optim" in sys.argv[3:]
z = np.load(npz)
ren = [("language_model.embedding.", "embedding."), ("language_model.encoder.final_norm.", "decoder.final_layernorm."),
       ("language_model.encoder.layers.", "decoder.layers."), ("language_model.output_layer.", "output_layer."),
       (".input_norm.", ".input_layernorm."), (".post_attention_norm.", ".pre_mlp_layernorm."),
       (".self_attention.query_key_value.", ".self_attention.linear_qkv."),
       (".self_attention.dense.", ".self_attention.linear_proj."), (".mlp.dense_h_to_4h.", ".mlp.linear_fc1."),
       (".mlp.dense_4h_to_h.", ".mlp.linear_fc2.")]
want = {}
for k in z.files:
    n = k
    for a, b in ren:
        n = n.replace(a, b)
    want[n] = z[k].astype(np.float32)
f = h5py.File(sorted(glob.glob(ckpt + "/iter_*/model.h5"))[-1], "r")
got = sorted(f["model"].keys())
assert got == sorted(want), ("tensors differ", sorted(set(got) ^ set(want)))
def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
bad = []
for k, w in want.items():
    assert np.array_equal(w.astype(np.float32).view(np.uint32) & 0xFFFF, np.zeros(w.shape, np.uint32)), k  # bf16 values
    if f["model"][k].shape != w.shape or not np.array_equal(bits(f["model"][k][()]), bits(w)):
        bad.append(k)
    if optim:
        for g, x in (("exp_avg", w * np.float32(0.5)), ("exp_avg_sq", w * w)):
            if not np.array_equal(bits(f["optimizer"][g][k][()]), bits(x)):
                bad.append(g + "/" + k)
if optim:
    assert int(f["optimizer"].attrs["step"]) == 100, f["optimizer"].attrs["step"]
else:
    assert "optimizer" not in f, "optimizer state where none was asked for or stored"
assert not bad, bad
print("%d tensors equal%s" % (len(want), " with the optimizer state" if optim else ""))
PY
}

# Rewrite FOLDER/iter_0000100/.metadata through Python's pickle, with stand-in classes for
# torch's (so that any edit of the Metadata tree can be made): EDIT is Python run with `md`
# bound to the Metadata, `sdm` to its state_dict_metadata, `sd` to its storage_data.
edit_metadata() {
	$PY - "$1/iter_0000100/.metadata" "$2" <<'PY'
import copyreg, pickle, sys, types

class Stub:
    """A class of torch's: REDUCE keeps its arguments, NEWOBJ + BUILD its state, and it
    pickles back the same way under the same module and name."""
    def __init__(self, *a):
        self._a = a
    def __setstate__(self, st):
        self._st = st
    def __reduce__(self):
        st = self.__dict__.get("_st")
        if "_a" in self.__dict__:
            return (type(self), self._a) if st is None else (type(self), self._a, st)
        return (copyreg.__newobj__, (type(self),), st)

def cls_for(module, name):
    m = sys.modules.setdefault(module, types.ModuleType(module))
    if not hasattr(m, name):
        setattr(m, name, type(name, (Stub,), {"__module__": module, "__qualname__": name}))
    return getattr(m, name)

class U(pickle.Unpickler):
    def find_class(self, module, name):
        return cls_for(module, name)

path = sys.argv[1]
md = U(open(path, "rb")).load()
sdm, sd = md._st["state_dict_metadata"], md._st["storage_data"]
exec(sys.argv[2])
open(path, "wb").write(pickle.dumps(md, protocol=4))
PY
}

copy_fixture() { cp -r "$FIX/$1" "$2"; chmod -R u+w "$2"; }

@test "import: each of the four torch_dist fixtures equals source.npz bit for bit (weights, and the optimizer state where stored)" {
	for f in gpt2-tp1pp1-m12 gpt2-tp2pp2-mh llama-tp2pp1-m12 llama-tp1pp2-mh; do
		run -0 --separate-stderr mt-ckpt-reshard import --format megatron "$FIX/$f" "$f"
		echo "$stderr"
		case $f in
		*-mh) [[ $stderr == *"into $f at iteration 100, with the optimizer state"* ]]
		      run -0 same_as_source "$f" "$SRC/$(model_of $f)/source.npz" --optim ;;
		*)    [[ $stderr == *"into $f at iteration 100, weights only"* ]]
		      run -0 same_as_source "$f" "$SRC/$(model_of $f)/source.npz" ;;
		esac
		echo "$output"
		[[ $output == *"tensors equal"* ]]
	done
	# an iteration directory names the checkpoint too
	mt-ckpt-reshard import -q --format megatron "$FIX/llama-tp2pp1-m12/iter_0000100" it
	run -0 same_as_source it "$SRC/llama/source.npz"
}

@test "import: the optimizer's moments are w/2 and w*w, the step 100; --no-load-optim imports the weights only" {
	mt-ckpt-reshard import -q --format megatron --check-crc "$FIX/gpt2-tp2pp2-mh" a
	run -0 same_as_source a "$SRC/gpt2/source.npz" --optim
	[ "$output" = "52 tensors equal with the optimizer state" ]
	run -0 --separate-stderr mt-ckpt-reshard import --format megatron --no-load-optim "$FIX/llama-tp1pp2-mh" b
	[[ $stderr == *"weights only"* ]]
	run -0 same_as_source b "$SRC/llama/source.npz"
	[ "$output" = "27 tensors equal" ]
}

@test "import: iteration 100 and Megatron's args (sizes, GQA, SwiGLU, RoPE, untied) read from common.pt and from common_state" {
	mt-ckpt-reshard import -q --format megatron "$FIX/llama-tp1pp2-mh" l
	run -0 mt-ckpt-reshard inspect --json l
	[[ $output == *'"iteration": 100'* ]]
	[[ $output == *'"num-layers": 4'* && $output == *'"hidden-size": 64'* && $output == *'"num-query-groups": 2'* ]]
	[[ $output == *'"swiglu": true'* && $output == *'"position-embedding-type": "rope"'* ]]
	[[ $output == *'"normalization": "RMSNorm"'* && $output == *'"untie-embeddings-and-output-weights": true'* ]]
	[[ $output == *'"padded-vocab-size": 1024'* && $output == *'"optimizer_step": 100'* ]]
	[[ $output == *'"ckpt_format": "torch_dist"'* && $output == *'"pipeline_model_parallel_size": 2'* ]]
	mt-ckpt-reshard import -q --format megatron "$FIX/gpt2-tp1pp1-m12" g
	run -0 mt-ckpt-reshard inspect --json g
	[[ $output == *'"iteration": 100'* && $output == *'"position-embedding-type": "learned_absolute"'* ]]
	[[ $output == *'"normalization": "LayerNorm"'* && $output == *'"swiglu": false'* ]]
	[[ $output == *'"untie-embeddings-and-output-weights": false'* && $output == *'"optimizer_step": null'* ]]
	# --iteration overrides the checkpoint's
	mt-ckpt-reshard import -q --format megatron --iteration 7 "$FIX/gpt2-tp1pp1-m12" g7
	run -0 mt-ckpt-reshard inspect --json g7
	[[ $output == *'"iteration": 7'* ]]
}

@test "layouts: every import rewritten by mt to TP1PP1, TP2PP2, TP2PP1 and TP1PP2 still holds source.npz's tensors bit for bit" {
	for f in gpt2-tp1pp1-m12 gpt2-tp2pp2-mh llama-tp2pp1-m12 llama-tp1pp2-mh; do
		mt-ckpt-reshard import -q --format megatron "$FIX/$f" "$f"
		opt=; [[ $f == *-mh ]] && opt=--optim
		for tp in 1 2; do
			for pp in 1 2; do
				mt-ckpt-reshard -q --load "$f" --save "$f-$tp$pp" --target-tensor-parallel-size $tp \
					--target-pipeline-parallel-size $pp
				n=$(ls "$f-$tp$pp"/iter_0000100/ | grep -c '^model-tp' || true)
				[ "$n" -eq $((tp * pp)) ] || { echo "$f-$tp$pp: $n part files"; false; }
				run -0 same_as_source "$f-$tp$pp" "$SRC/$(model_of $f)/source.npz" $opt
			done
		done
	done
}

@test "refusals: a .metadata global outside the list, a chunk that is not a ZIP, zarr, a truncated .distcp, chunks that do not tile" {
	copy_fixture gpt2-tp1pp1-m12 g
	# a global the allow-list does not hold, named
	$PY - g/iter_0000100/.metadata <<'PY'
import sys
p = sys.argv[1]
b = open(p, "rb").read()
old = b"\x8c\x13torch.serialization\x94\x8c\x0b_get_layout"
assert old in b
open(p, "wb").write(b.replace(old, b"\x8c\x02os\x94\x8c\x06system"))
PY
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/.metadata' byte "*"global 'os.system' is not in the list of globals read"* ]]
	[ ! -e x ]

	# a chunk that does not start PK\x03\x04
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	$PY - g/iter_0000100/__0_0.distcp <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
# every archive's first local header (its data.pkl's) now starts XK: every chunk of the file
n, i = 0, b.find(b"PK\x03\x04archive/data.pkl"[:4])
while i >= 0:
    if b[i + 30:i + 30 + 16] == b"archive/data.pkl":
        b[i] = ord("X")
        n += 1
    i = b.find(b"PK\x03\x04", i + 1)
assert n > 4, n
open(p, "wb").write(bytes(b))
PY
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/__0_0.distcp': the chunk of '"*"' at bytes "*"does not start PK\\x03\\x04"* ]]
	[ ! -e x ]

	# another backend
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	printf '{"sharded_backend": "zarr", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1}' \
		> g/iter_0000100/metadata.json
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/metadata.json': sharded_backend \"zarr\": only Megatron's torch_dist format is read"* ]]
	[ ! -e x ]

	# a truncated .distcp
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	truncate -s 100000 g/iter_0000100/__0_1.distcp
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/__0_1.distcp': 100000 bytes, too short for the archive at bytes "*"(truncated?)"* ]]
	[ ! -e x ]

	# chunks that leave a gap, and chunks that overlap
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	edit_metadata g 'c = sdm["decoder.layers.mlp.linear_fc2.bias"]._st["chunks"]; c.pop()'
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/.metadata': the chunks of 'decoder.layers.mlp.linear_fc2.bias' cover 192 of its 256 elements: they do not tile the tensor"* ]]
	[ ! -e x ]
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	edit_metadata g 'c = sdm["decoder.layers.mlp.linear_fc2.bias"]._st["chunks"]; c[3] = c[2]'
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *".distcp (bytes "*"': 'decoder.layers.mlp.linear_fc2.bias': its chunks overlap (element "*" twice): they do not tile the tensor"* ]]
	[ ! -e x ]
	# a flipped bit in a chunk's data: --check-crc catches it
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	$PY - g/iter_0000100/__0_1.distcp <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
i, n = b.find(b"PK\x03\x04"), 0
while i >= 0:
    nlen, xlen = struct.unpack("<HH", b[i + 26:i + 30])
    if b[i + 30:i + 30 + nlen] == b"archive/data/0":
        b[i + 30 + nlen + xlen] ^= 1
        n += 1
    i = b.find(b"PK\x03\x04", i + 1)
assert n > 4, n
open(p, "wb").write(bytes(b))
PY
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron --check-crc g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/__0_1.distcp (bytes "*"member 'archive/data/0'"*"fails its CRC-32 check"* ]]
	[ ! -e x ]
	# the untouched copy imports (the edits, not the copying, made those fail)
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	edit_metadata g 'pass'
	mt-ckpt-reshard import -q --format megatron g x
	run -0 same_as_source x "$SRC/gpt2/source.npz"
}

@test "refusals: the distributed optimizer's layouts (unless --no-load-optim), a stream transform, a file outside the folder" {
	copy_fixture gpt2-tp2pp2-mh g
	# the plain optimizer's keys renamed as the distributed optimizer's (dp_reshardable) ones
	edit_metadata g '
for k in [k for k in sdm if k.startswith("optimizer.state.exp_avg.")]:
    n = "optimizer.distributed.dp_group_idx_0." + k
    sdm[n] = sdm.pop(k)
for i in sd:
    if i._st["fqn"].startswith("optimizer.state.exp_avg."):
        i._st["fqn"] = "optimizer.distributed.dp_group_idx_0." + i._st["fqn"]
'
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/.metadata': the optimizer state is the distributed optimizer's"*"--no-load-optim"* ]]
	[ ! -e x ]
	mt-ckpt-reshard import -q --format megatron --no-load-optim g w
	run -0 same_as_source w "$SRC/gpt2/source.npz"

	# a compressed (stream-transformed) entry
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	edit_metadata g 'next(iter(sd.values()))._st["transform_descriptors"] = ["zstd"]'
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"g/iter_0000100/.metadata': '"*"' is stored through a stream transform"* ]]
	[ ! -e x ]

	# a relative path that leaves the folder
	rm -r g && copy_fixture gpt2-tp1pp1-m12 g
	edit_metadata g 'next(iter(sd.values()))._st["relative_path"] = "../../etc/passwd"'
	run -3 --separate-stderr mt-ckpt-reshard import --format megatron g x
	echo "$stderr"
	[[ $stderr == *"names the file \"../../etc/passwd\", not a file of the folder"* ]]
	[ ! -e x ]
}
