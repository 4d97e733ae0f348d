#!/usr/bin/env bats
# Megatron's dataset behaviour where running Megatron-LM's own code beside mt found mt
# different, each stated here as a fixture: a per-split blend of one weighted source is a
# plain GPTDataset; existing index caches (the numpy reference's, which are Megatron's
# files, or mt's own) are read, and rebuilt when they fail a check; cache names are the
# MD5 of the description with current Megatron-LM's tokenizer identifiers (the legacy
# ones behind --legacy-tokenizer).
load helpers

PY=/usr/bin/python3 # Debian's python3, which has numpy
REF=$MT_ROOT/tests/reference

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	$PY "$REF/megatron_indices.py" make-idx --prefix a --lengths "$($PY -c '
import random; r = random.Random(5); print(",".join(str(r.randint(1, 60)) for _ in range(300)))')"
}

setup() {
	$PY -c 'import numpy' 2>/dev/null || skip "Debian's python3-numpy is not installed"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

# inode and modification time of every file under DIR, one a line
stamps() { find "$1" -type f -printf '%P %i %T@\n' | sort; }

@test "per-split blend of one weighted source: Megatron's plain GPTDataset of N samples, no BlendedDataset" {
	# Megatron (blended_megatron_dataset_builder.py, per-split branch): one path always
	# gives a plain GPTDataset built for the split's N samples; its weight is ignored
	$PY "$REF/megatron_indices.py" gpt --prefix "$F/a" --split none --seq-length 16 \
		--num-samples train=1000 --cache-dir ref > /dev/null
	run -0 --separate-stderr mt-blend build --train-data-path "1 $F/a" --seq-length 16 --train-samples 1000 \
		--data-cache-path weighted
	run -0 --separate-stderr mt-blend build --train-data-path "0.25 $F/a" --seq-length 16 --train-samples 1000 \
		--data-cache-path quarter
	diff -r ref weighted
	diff -r ref quarter
	! ls weighted | grep -q BlendedDataset
	grep -q '"num_samples": 1000,' weighted/*-GPTDataset-train-description.txt
	# the samples served are the plain dataset's
	plan-samples 1000 --train-data-path "$F/a" --seq-length 16 --train-samples 1000 > plain.txt
	plan-samples 1000 --train-data-path "1 $F/a" --seq-length 16 --train-samples 1000 > one.txt
	cmp plain.txt one.txt
	# under --data-path a weighted single source stays a blend (Megatron builds one there)
	run -0 --separate-stderr mt-blend build --data-path "1 $F/a" --seq-length 16 --train-samples 1000 \
		--split 100,0,0 --data-cache-path blend
	ls blend | grep -q BlendedDataset-train-dataset_index.npy
	grep -q '"num_samples": 1005,' blend/*-GPTDataset-train-description.txt
}

@test "index caches are read, not rebuilt: Megatron's files and mt's own stay untouched, and serve the samples" {
	$PY "$REF/megatron_indices.py" gpt --prefix "$F/a" --seq-length 16 --num-samples train=300 --split 100,0,0 \
		--cache-dir ref > /dev/null
	stamps ref > before.txt
	sleep 1
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 \
		--data-cache-path ref
	[[ $stderr != *warning* ]]
	stamps ref > after.txt
	diff before.txt after.txt
	# the cache is what is read: two entries of the shuffle index swapped (still a
	# permutation, so it passes the checks, as Megatron would read it) change the order
	$PY - <<'EOF'
import glob
import numpy as np
f = glob.glob("ref/*-GPTDataset-train-shuffle_index.npy")[0]
s = np.load(f)
s[[0, 1]] = s[[1, 0]]
np.save(f, s)
EOF
	plan-samples 300 --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 > built.txt
	plan-samples 300 --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 --data-cache-path ref > read.txt
	[ "$(sed -n 1p read.txt | cut -d' ' -f3-)" = "$(sed -n 2p built.txt | cut -d' ' -f3-)" ]
	[ "$(sed -n 2p read.txt | cut -d' ' -f3-)" = "$(sed -n 1p built.txt | cut -d' ' -f3-)" ]
	[ "$(sed -n '3,$p' read.txt)" = "$(sed -n '3,$p' built.txt)" ]
	# mt's own cache, written once, is read the next time: nothing rewritten
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 \
		--data-cache-path own
	stamps own > own1.txt
	sleep 1
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 \
		--data-cache-path own
	stamps own > own2.txt
	diff own1.txt own2.txt
}

@test "a cache that fails a check is rebuilt with a warning naming the file and the reason" {
	$PY "$REF/megatron_indices.py" gpt --prefix "$F/a" --seq-length 16 --num-samples train=300 --split 100,0,0 \
		--cache-dir ref > /dev/null
	cp -r ref good
	# a shuffle index with a sample that does not exist; a document index one short; a sample
	# index that goes backwards; a description that is not this dataset's
	$PY - <<'EOF'
import glob, shutil
import numpy as np
for case in ("shuffle", "document", "sample", "description"):
    shutil.copytree("good", case)
    if case == "description":
        f = glob.glob(f"{case}/*-description.txt")[0]
        open(f, "a").write(" ")
        continue
    f = glob.glob(f"{case}/*-GPTDataset-train-{case}_index.npy")[0]
    a = np.load(f)
    if case == "shuffle":
        a[5] = len(a) + 7
    elif case == "document":
        a = a[:-1]
    else:
        a[3] = a[2] - [1, 0] if a[2][0] > 0 else a[2] - [0, 1]
    np.save(f, a)
EOF
	for case in shuffle document sample description; do
		run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 300 \
			--split 100,0,0 --data-cache-path "$case"
		echo "$case: $stderr"
		[[ $stderr == *"warning: index cache not used, rebuilding it: '$case/"* ]]
		diff -r good "$case"
	done
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 \
		--data-cache-path shuffle
	[[ $stderr != *warning* ]]
}

@test "cache names: current Megatron-LM's tokenizer identifiers for the GPT-2 tokenizer by default, the legacy ones with --legacy-tokenizer" {
	# The description GPTDataset hashes, json.dumps(indent=4) of its unique_identifiers,
	# with the tokenizer as current Megatron-LM builds it for --tokenizer-type
	# GPT2BPETokenizer (megatron/core/tokenizers: DefaultTokenizerText, path the type's
	# name, every keyword argument as str()), and as the legacy _GPT2BPETokenizer did
	$PY - "$F/a" > want.txt <<'EOF'
import hashlib, json, sys
from collections import OrderedDict as O
current = O([("class", "megatron.core.tokenizers.text.models.default_tokenizer.DefaultTokenizerText"),
             ("tokenizer_path", "GPT2BPETokenizer"), ("additional_special_tokens", "[]"),
             ("vocab_file", "v.json"), ("merges_file", "m.txt"), ("use_fast", "True"),
             ("trust_remote_code", "False"), ("include_special_tokens", "True")])
legacy = O([("class", "_GPT2BPETokenizer"), ("tokenizer_path", ["v.json", "m.txt"])])
for tok in (current, legacy):
    d = O([("class", "GPTDataset"), ("dataset_path", sys.argv[1]), ("num_samples", 100), ("index_split", "train"),
           ("random_seed", 1234), ("sequence_length", 16), ("split", "100,0,0"),
           ("split_matrix", [[0, 1.0], None, None]), ("tokenizer", tok)])
    text = json.dumps(d, indent=4)
    print(hashlib.md5(text.encode("utf-8")).hexdigest())
EOF
	cur=$(sed -n 1p want.txt)
	leg=$(sed -n 2p want.txt)
	[ "$cur" != "$leg" ]
	TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt)
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 100 --split 100,0,0 \
		"${TOK[@]}" --data-cache-path c
	ls "c/$cur-GPTDataset-train-description.txt" "c/$cur-GPTDataset-train-shuffle_index.npy"
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 100 --split 100,0,0 \
		"${TOK[@]}" --legacy-tokenizer --data-cache-path l
	ls "l/$leg-GPTDataset-train-description.txt"
	# --tokenizer-identifiers still gives them exactly
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 100 --split 100,0,0 \
		--tokenizer-identifiers '{"class": "_GPT2BPETokenizer", "tokenizer_path": ["v.json", "m.txt"]}' --data-cache-path i
	ls "i/$leg-GPTDataset-train-description.txt"
}
