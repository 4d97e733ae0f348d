#!/usr/bin/env bats
# mt-blend and the index algorithms behind it (and behind mt-index build and mt-train),
# against the independent numpy reference in tests/reference/megatron_indices.py.
load helpers

PY=/usr/bin/python3 # Debian's python3, which has numpy
REF=$MT_ROOT/tests/reference

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	$PY "$REF/megatron_indices.py" make-idx --prefix a --lengths "$($PY -c '
import random; r = random.Random(5); print(",".join(str(r.randint(1, 60)) for _ in range(300)))')"
	$PY "$REF/megatron_indices.py" make-idx --prefix b --lengths "$($PY -c '
import random; r = random.Random(9); print(",".join(str(r.randint(1, 200)) for _ in range(2000)))')"
}

setup() {
	$PY -c 'import numpy' 2>/dev/null || skip "Debian's python3-numpy is not installed"
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

@test "3000 random configurations: document, sample and shuffle indices and blends equal numpy's, element for element" {
	$PY "$REF/indices_batch.py" --generate 11 3000 > cfg.txt
	$PY "$REF/indices_batch.py" < cfg.txt > ref.txt
	indices < cfg.txt > mt.txt
	cmp ref.txt mt.txt
	# the hard cases are there
	[ "$(grep -c '^separate_final_epoch 1' ref.txt)" -gt 300 ]
	[ "$(grep -c '^num_epochs [2-9]' ref.txt)" -gt 400 ]
	[ "$(grep -c '^dataset_index int16' ref.txt)" -gt 500 ]
	grep -q '^sample_index int32' ref.txt
}

@test "blend prefixes follow the weights: two sources within one sample, more within Megatron's bound" {
	$PY "$REF/indices_batch.py" --generate 12 3000 > cfg.txt
	indices < cfg.txt | $PY "$REF/blend_prefix_check.py" cfg.txt
}

@test "build: a single dataset's GPTDataset caches are byte-identical to the reference's (names, .npy, descriptions)" {
	$PY "$REF/megatron_indices.py" gpt --prefix "$F/a" --seq-length 16 --num-samples train=1000,valid=200 \
		--cache-dir ref > /dev/null
	run -0 --separate-stderr mt-blend build --data-path "$F/a" --seq-length 16 --train-samples 1000 \
		--valid-samples 200 --data-cache-path mt
	[ "$(ls ref | wc -l)" -eq 8 ]
	diff -r ref mt
}

@test "build: a weighted blend's GPTDataset and BlendedDataset caches are byte-identical to the reference's" {
	$PY "$REF/megatron_indices.py" blend-gpt --data-path "0.3 $F/a 0.7 $F/b" --seq-length 32 \
		--split "90,10,0" --num-samples train=3000,valid=300 --cache-dir ref > /dev/null
	run -0 --separate-stderr mt-blend build --data-path "0.3 $F/a 0.7 $F/b" --seq-length 32 --split "90,10,0" \
		--train-samples 3000 --valid-samples 300 --data-cache-path mt
	ls ref | grep -q BlendedDataset-train-dataset_index.npy
	[ "$(ls ref | wc -l)" -eq 22 ]
	diff -r ref mt
}

@test "build: per-split data paths use whole datasets, with null split in the descriptions" {
	$PY "$REF/megatron_indices.py" gpt --prefix "$F/b" --split none --seq-length 20 \
		--num-samples train=500 --cache-dir ref > /dev/null
	run -0 --separate-stderr mt-blend build --train-data-path "$F/b" --seq-length 20 --train-samples 500 \
		--data-cache-path mt
	diff -r ref mt
	grep -q '"split": null' mt/*description.txt
}

@test "build without --data-cache-path writes beside the dataset, as Megatron does" {
	cp "$F"/a.bin "$F"/a.idx .
	run -0 --separate-stderr mt-blend build --data-path a --seq-length 16 --train-samples 100
	ls a/cache/GPTDataset_indices/*-GPTDataset-train-shuffle_index.npy
}

@test "plan: per-source counts and epochs match the reference's plan; oversampling and unused sources are warned" {
	$PY "$REF/megatron_indices.py" blend-plan --weights 1,3,0 --num-samples train=2000 > ref.txt
	run -0 --separate-stderr mt-blend plan --data-path "1 $F/a 3 $F/b 0 $F/a" --seq-length 32 --train-samples 2000 --json
	echo "$output" > plan.json
	$PY - ref.txt plan.json <<'PY'
import json, sys
ref = {l.split()[0]: l.split()[1:] for l in open(sys.argv[1])}
plan = json.load(open(sys.argv[2]))["splits"]["train"]
assert [str(s["target_samples"]) for s in plan["sources"]] == ref["target"], (plan, ref)
assert str(plan["samples"]) == ref["size"][0], (plan["samples"], ref["size"])
assert plan["sources"][0]["epochs"] > 1          # a: 1/4 of 1000 samples of 33 tokens is more than it has
assert plan["sources"][2]["used_samples"] == 0   # weight 0
assert sum(s["used_samples"] for s in plan["sources"]) == plan["samples"]
assert plan["requested_samples"] == 2000
PY
	[[ $stderr == *"'$F/a' is oversampled"* ]]
	[[ $stderr == *"'$F/a' ends up unused"* ]]
	# -q before the command word: the same plan
	run -0 --separate-stderr mt-blend -q plan --data-path "1 $F/a 3 $F/b 0 $F/a" --seq-length 32 --train-samples 2000 --json
	[ "$output" = "$(cat plan.json)" ]
}

@test "plan: the human table names every source with its weight, documents and epochs" {
	run -0 --separate-stderr mt-blend plan --data-path "0.3 $F/a 0.7 $F/b" --seq-length 32 --train-samples 3000 \
		--global-batch-size 10
	[[ $output == *"train: 3000 samples of 32 tokens"* ]]
	[[ $output == *"valid: "* && $output == *"test: "* ]]
	[[ $output == *"0.3000"*"$F/a"* ]]
	[[ $output == *"0.7000"*"$F/b"* ]]
}

@test "sample counts follow Megatron: train iters x batch, valid (iters // interval + 1) x eval iters x batch" {
	run -0 --separate-stderr mt-blend plan --data-path "$F/b" --seq-length 8 --train-iters 100 --global-batch-size 4 \
		--eval-interval 30 --eval-iters 2 --json
	echo "$output" | $PY -c '
import json, sys
s = json.load(sys.stdin)["splits"]
assert s["train"]["requested_samples"] == 400, s["train"]
assert s["valid"]["requested_samples"] == (100 // 30 + 1) * 2 * 4, s["valid"]
assert s["test"]["requested_samples"] == 2 * 4, s["test"]
assert s["train"]["samples"] >= 400 # a plain dataset serves whole epochs'
}

@test "--data-args-path and --per-split-data-args-path read the blends from files" {
	echo "0.3 $F/a 0.7 $F/b" > blend.txt
	run -0 mt-blend plan --data-args-path blend.txt --seq-length 32 --train-samples 100 --json
	[[ $output == *"\"weight\": 0.3"* ]]
	printf '{"train": "%s", "valid": ["%s"]}' "$F/b" "$F/a" > split.json
	run -0 mt-blend plan --per-split-data-args-path split.json --seq-length 8 --train-samples 50 --valid-samples 5 --json
	echo "$output" | $PY -c '
import json, sys; s = json.load(sys.stdin)["splits"]; assert set(s) == {"train", "valid"}, s'
}

@test "errors: missing options, bad weights, --split with per-split paths, missing or bad datasets" {
	run -2 --separate-stderr mt-blend plan --data-path "$F/a" --train-samples 10
	[[ $stderr == *"--seq-length is required"* ]]
	run -2 --separate-stderr mt-blend plan --data-path "$F/a" --seq-length 8
	[[ $stderr == *"--train-samples"* ]]
	run -2 --separate-stderr mt-blend plan --data-path "-1 $F/a 2 $F/b" --seq-length 8 --train-samples 10
	[[ $stderr == *"weight -1"* ]]
	run -2 --separate-stderr mt-blend plan --train-data-path "$F/a" --split 9,1,0 --seq-length 8 --train-samples 10
	[[ $stderr == *"--split does not go with per-split"* ]]
	# a weight that is not a number makes every token a path (Megatron's rule): '0.5' is then missing
	run -4 --separate-stderr mt-blend plan --data-path "0.5 $F/a x $F/b" --seq-length 8 --train-samples 10
	[[ $stderr == *"cannot open '0.5.idx'"* || $stderr == *"'0.5"* ]]
	printf 'not an index at all, not at all, no' > bad.idx
	: > bad.bin
	run -3 --separate-stderr mt-blend plan --data-path bad --seq-length 8 --train-samples 10
	[[ $stderr == *"bad.idx"* ]]
	run -2 --separate-stderr mt-blend frobnicate
	[[ $stderr == *"unknown command 'frobnicate'"* ]]
}

@test "the samples mt-train reads are the reference's token for token (shuffle, document boundaries, padding)" {
	$PY "$REF/megatron_indices.py" gpt --prefix "$F/a" --seq-length 16 --num-samples train=300 --split 100,0,0 \
		--print-samples 300 | awk '/^split train/ { on = 1 } /^split valid/ { on = 0 } on && /^sample / ' > ref.txt
	[ "$(wc -l < ref.txt)" -eq 300 ]
	plan-samples 300 --data-path "$F/a" --seq-length 16 --train-samples 300 --split 100,0,0 > mt.txt
	cmp ref.txt mt.txt
}

@test "no limit on sources: from 32767 sources dataset_index widens to int32, Megatron's int16 below" {
	$PY -c 'print("blend 1000 " + ",".join(["1"] * 32767))' > wide.txt
	$PY -c 'print("blend 1000 " + ",".join(["1"] * 32766))' > narrow.txt
	run -0 bash -c 'indices < wide.txt | head -n 1 | cut -c1-19'
	[ "$output" = "dataset_index int32" ]
	run -0 bash -c 'indices < narrow.txt | head -n 1 | cut -c1-19'
	[ "$output" = "dataset_index int16" ]
	# and the blend itself is right: 1000 samples from the first 1000 sources, one each
	run -0 bash -c 'indices < wide.txt | head -n 1 | tr " " "\n" | tail -n +3 | sort -n | uniq | wc -l'
	[ "$output" -eq 1000 ]
}
