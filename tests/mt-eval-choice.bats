#!/usr/bin/env bats
# mt-eval --multiple-choice: HellaSwag, PIQA, ARC and generic JSON lines scored as
# lm-evaluation-harness scores them, against an independent PyTorch reference
# (tests/reference/torch_choice.py) on a seeded fixture of a few dozen questions; the
# watch mode's ledger; --log-samples; errors.
load helpers
cpu_only

export OMP_NUM_THREADS=1
REF=$MT_ROOT/tests/reference

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 1500 > demo.jsonl
	mt-tokenize train -q --input demo.jsonl --vocab-size 300 --output-prefix T
	mt-tokenize -q --input demo.jsonl --output-prefix d --tokenizer-type GPT2BPETokenizer --vocab-file T-vocab.json \
		--merge-file T-merges.txt --append-eod
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path d_text_document --tokenizer-type GPT2BPETokenizer \
		--vocab-file T-vocab.json --merge-file T-merges.txt --split 100,0,0 --data-cache-path cache \
		--micro-batch-size 4 --global-batch-size 4 --train-iters 60 --lr 5e-3 --save ck --save-interval 30
	python3 "$REF/make-choice-fixture.py" demo.jsonl
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
}

need_torch() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null ||
		skip "/usr/bin/python3 lacks torch or h5py (scripts/install-deps.sh installs them)"
}

@test "acc and acc_norm of HellaSwag, PIQA, ARC and generic lines equal an independent PyTorch computation" {
	need_torch
	for t in hellaswag piqa arc generic; do
		mt-eval -q --load "$F/ck" --multiple-choice "$F/$t.jsonl" --micro-batch-size 3 --json --log-samples samples.jsonl > "mt-$t.json"
		"$REF/torch_choice.py" "$F/ck/iter_0000060/model.h5" "$F/$t.jsonl" --vocab-file "$F/T-vocab.json" \
			--merge-file "$F/T-merges.txt" > "ref-$t.json"
	done
	run -0 python3 - <<'EOF'
import json
samples = [json.loads(l) for l in open("samples.jsonl")]
for t in ("hellaswag", "piqa", "arc", "generic"):
    mt = json.load(open(f"mt-{t}.json"))
    ref = json.load(open(f"ref-{t}.json"))
    assert mt["task"] == t and mt["iteration"] == 60, mt
    # the fixture has no near ties, so rounding cannot turn a decision
    assert ref["min_gap"] > 1e-4, (t, ref["min_gap"])
    for k in ("examples", "correct", "correct_norm"):
        assert mt[k] == ref[k], (t, k, mt[k], ref[k])
    assert abs(mt["metrics"]["acc"] - ref["acc"]) < 1e-12 and abs(mt["metrics"]["acc_norm"] - ref["acc_norm"]) < 1e-12, (mt, ref)
    mine = [s["loglikelihoods"] for s in samples if s["task"] == t]
    assert len(mine) == ref["examples"], (t, len(mine))
    worst = max(abs(a - b) for x, y in zip(mine, ref["lls"]) for a, b in zip(x, y))
    assert worst < 1e-4, (t, worst)
    print(t, mt["examples"], "questions, acc", mt["metrics"]["acc"], "acc_norm", mt["metrics"]["acc_norm"], "worst", worst)
print("ok")
EOF
	echo "$output"
	[[ $output == *ok ]]
	# acc and acc_norm differ somewhere: the normalization is exercised
	run -0 python3 -c '
import json
assert any(json.load(open(f"mt-{t}.json"))["metrics"]["acc"] != json.load(open(f"mt-{t}.json"))["metrics"]["acc_norm"] for t in ("hellaswag", "piqa", "arc"))'
}

@test "the reference comparison can fail: HellaSwag scored without its preprocessing differs" {
	need_torch
	# the same questions as generic lines: context and endings taken raw, no preprocess
	python3 - "$F/hellaswag.jsonl" > raw.jsonl <<'EOF'
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(json.dumps({"context": d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"], "choices": d["endings"],
                      "label": int(d["label"])}))
EOF
	mt-eval -q --load "$F/ck" --multiple-choice raw.jsonl --log-samples raw-samples.jsonl --json > /dev/null
	"$REF/torch_choice.py" "$F/ck/iter_0000060/model.h5" "$F/hellaswag.jsonl" --vocab-file "$F/T-vocab.json" \
		--merge-file "$F/T-merges.txt" > ref.json
	run -1 python3 -c '
import json, sys
ref = json.load(open("ref.json"))["lls"]
mine = [json.loads(l)["loglikelihoods"] for l in open("raw-samples.jsonl")]
sys.exit(0 if max(abs(a - b) for x, y in zip(mine, ref) for a, b in zip(x, y)) < 1e-4 else 1)'
}

@test "--watch: each multiple-choice task is a ledger entry per checkpoint, named by NAME= or the file" {
	mt-eval -q --watch "$F/ck" --ledger ledger.jsonl --multiple-choice "$F/piqa.jsonl" --multiple-choice "arc_easy=$F/arc.jsonl" --json > out1.jsonl
	[ "$(wc -l < out1.jsonl)" -eq 4 ]
	run -0 python3 -c '
import json
rows = [json.loads(l) for l in open("ledger.jsonl")]
got = sorted((r["iteration"], r["task"]) for r in rows)
assert got == [(30, "arc_easy"), (30, "piqa"), (60, "arc_easy"), (60, "piqa")], got
assert all(set(r["metrics"]) == {"acc", "acc_norm"} for r in rows), rows'
	# nothing new: nothing evaluated again; a new task on the same checkpoints is
	mt-eval -q --watch "$F/ck" --ledger ledger.jsonl --multiple-choice "$F/piqa.jsonl" --multiple-choice "arc_easy=$F/arc.jsonl" --json > out2.jsonl
	[ ! -s out2.jsonl ]
	mt-eval -q --watch "$F/ck" --ledger ledger.jsonl --multiple-choice "$F/hellaswag.jsonl" --json > out3.jsonl
	[ "$(wc -l < out3.jsonl)" -eq 2 ]
	[ "$(wc -l < ledger.jsonl)" -eq 6 ]
}

@test "errors: a line of no known form, a gold label out of range, bad names, --log-samples alone" {
	printf '%s\n' '{"goal": "x", "sol1": "a", "sol2": "b", "label": 0}' '{"text": "no choices"}' > bad.jsonl
	run -3 --separate-stderr mt-eval -q --load "$F/ck" --multiple-choice bad.jsonl
	[[ $stderr == *"bad.jsonl:2: not a multiple-choice line"* ]]
	printf '%s\n' '{"context": "x", "choices": ["a", "b"], "label": 2}' > gold.jsonl
	run -3 --separate-stderr mt-eval -q --load "$F/ck" --multiple-choice gold.jsonl
	[[ $stderr == *"gold.jsonl:1: the gold index 2 is not one of the 2 choices"* ]]
	printf '%s\n' '{"question": "q", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "B"}' > arc.jsonl
	run -3 --separate-stderr mt-eval -q --load "$F/ck" --multiple-choice arc.jsonl
	[[ $stderr == *'answerKey "B" is not one of the choices'* ]]
	run -2 --separate-stderr mt-eval -q --load "$F/ck" --multiple-choice "lambada=$F/piqa.jsonl"
	[[ $stderr == *"the name of another task"* ]]
	run -2 --separate-stderr mt-eval -q --load "$F/ck" --multiple-choice "$F/piqa.jsonl" --multiple-choice "$F/piqa.jsonl"
	[[ $stderr == *"two tasks named 'piqa'"* ]]
	run -2 --separate-stderr mt-eval -q --load "$F/ck" --lambada x --log-samples s.jsonl
	[[ $stderr == *"--log-samples goes with --multiple-choice"* ]]
	run -4 --separate-stderr mt-eval -q --load "$F/ck" --multiple-choice missing.jsonl
}
