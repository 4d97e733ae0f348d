#!/usr/bin/env bats
# mt-eval: validation loss against mt-train's own, text tasks against an independent PyTorch
# reference, --json, the watch mode (concurrent runs, a killed run, a torn ledger line,
# incomplete checkpoints) and errors.
load helpers
cpu_only

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	export OMP_NUM_THREADS=1
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 2000 > c.jsonl
	mt-tokenize train -q --input c.jsonl --vocab-size 400 --output-prefix bpe
	mt-tokenize -q --input c.jsonl --json-keys text --tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json \
		--merge-file bpe-merges.txt --append-eod --output-prefix c
	# absolute data paths: the checkpoint records them for mt-eval's --valid
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path "$PWD/c_text_document" \
		--tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json --merge-file bpe-merges.txt --split 90,8,2 \
		--make-vocab-size-divisible-by 128 \
		--data-cache-path "$PWD/cache" --micro-batch-size 4 --global-batch-size 8 --train-iters 150 --lr 3e-3 \
		--eval-interval 50 --eval-iters 4 --save ck --save-interval 50 --log-interval 50 --log-json log.jsonl
	# a WikiText-like text file and LAMBADA-like JSON lines (the answer is named earlier in the text)
	python3 - <<'EOF'
import json, re
docs = [json.loads(l)["text"] for l in open("c.jsonl")]
open("wiki.txt", "w").write(" ".join(docs[:40]) + "\n")
# the same stories tokenized the way WikiText is, for Megatron's detokenizer (chosen by "wiki" in the name)
def wikify(t):
    for a, b in ((", ", " , "), (". ", " . "), (": ", " : "), ("'s", " 's"), ("(", "( "), (")", " )"),
                 ("\u201c", '" '), ("\u201d", ' "')):
        t = t.replace(a, b)
    return re.sub(r"([0-9]+)", r"\1 @,@ 500", t)
lines = []
for i, d in enumerate(docs[40:80]):
    if i % 10 == 0:
        lines.append(f" = = Part {i // 10} = = ")
    lines.append(" " + wikify(d) + " ")
open("wiki.test.tokens", "w").write("\n".join(lines) + "\n")
with open("lambada.jsonl", "w") as f:
    for t in docs[1500:1620]:
        i = t.find(" looked at ")
        if i >= 0:
            f.write(json.dumps({"text": t[: t.find(" and", i)]}) + "\n")
EOF
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	export OMP_NUM_THREADS=1
}

# The PyTorch reference runs on Debian's /usr/bin/python3 (python3-torch, python3-h5py).
need_torch() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null ||
		skip "/usr/bin/python3 lacks torch or h5py (scripts/install-deps.sh --test installs them)"
}

# python3 -c with the checks; a failed assert prints its message
check() { python3 -c "$@"; }

@test "--valid equals mt-train's own validation loss at each evaluation (same split, same samples)" {
	for it in 50 100 150; do
		first=$(( (it / 50 - 1) * 32 ))
		run -0 --separate-stderr mt-eval --load "$F/ck/iter_0000$(printf %03d $it)" --valid --first-sample $first --json
		echo "$output"
		check 'import json, math, sys
it, out = int(sys.argv[1]), json.loads(sys.argv[2])
log = [json.loads(l) for l in open(sys.argv[3]) if "valid_loss" in l]
want = [d["valid_loss"] for d in log if d["iteration"] == it][0]
got = out["metrics"]["loss"]
assert abs(got - want) <= 1e-6 * want, (got, want)
assert abs(out["metrics"]["ppl"] - math.exp(got)) <= 1e-9 * math.exp(got)
assert out["iteration"] == it and out["task"] == "valid" and out["split"] == "valid"
assert out["samples"] == 32 and out["tokens"] == 32 * 64, out
assert out["checkpoint"].endswith("iter_%07d" % it)
assert out["dataset_hash"].startswith("sha256:") and len(out["dataset_hash"]) == 71
assert out["seconds"] >= 0' "$it" "$output" "$F/log.jsonl"
	done
	# the same samples give the same hash whatever the micro-batch size; other samples another
	# (and the same loss: the last micro-batch of 3 x 10 + 2 runs as a batch of 2)
	mt-eval -q --load "$F/ck" --valid --json --micro-batch-size 3 > mb3.json
	mt-eval -q --load "$F/ck" --valid --json > mb4.json
	check 'import json; a, b = (json.load(open(f))["metrics"]["loss"] for f in ("mb3.json", "mb4.json")); assert abs(a - b) <= 1e-6 * b, (a, b)'
	h1=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_hash"])' < mb3.json)
	h2=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_hash"])' < mb4.json)
	h3=$(mt-eval -q --load "$F/ck" --valid --json --first-sample 8 | python3 -c 'import json,sys; print(json.load(sys.stdin)["dataset_hash"])')
	[ "$h1" = "$h2" ] && [ "$h1" != "$h3" ]
	# a blend given here replaces the recorded data path: other samples, a finite loss
	run -0 mt-eval -q --load "$F/ck" --data-path 0.3 "$F/c_text_document" 0.7 "$F/c_text_document" --json
	check 'import json, sys, math
d = json.loads(sys.argv[1])
assert d["task"] == "valid" and math.isfinite(d["metrics"]["loss"]) and d["dataset_hash"] != sys.argv[2], d' "$output" "$h2"
	# --test and --eval-samples: the test split, 5 samples
	run -0 mt-eval -q --load "$F/ck" --test --eval-samples 5 --json
	check 'import json,sys; d = json.loads(sys.argv[1]); assert d["task"] == "test" and d["tokens"] == 5 * 64, d' "$output"
}

@test "--wikitext and --lambada equal an independent PyTorch computation" {
	need_torch
	run -0 --separate-stderr mt-eval --load "$F/ck" --wikitext "$F/wiki.txt" --lambada "$F/lambada.jsonl" --json
	echo "$output" > mt.jsonl
	"$MT_ROOT/tests/reference/torch_eval.py" "$F/ck/iter_0000150/model.h5" --vocab-file "$F/bpe-vocab.json" \
		--merge-file "$F/bpe-merges.txt" --wikitext "$F/wiki.txt" --lambada "$F/lambada.jsonl" > ref.jsonl
	cat mt.jsonl ref.jsonl
	check 'import json
mt = {d["task"]: d for d in map(json.loads, open("mt.jsonl"))}
ref = {d["task"]: d for d in map(json.loads, open("ref.jsonl"))}
w, r = mt["wikitext"], ref["wikitext"]
assert w["tokens"] == r["tokens"] and w["words"] == r["words"] and w["windows"] == r["windows"], (w, r)
for k in ("token_loss", "token_ppl", "word_ppl", "token_word_ratio"):
    a, b = w["metrics"][k], r[k]
    assert abs(a - b) <= 1e-5 * abs(b), (k, a, b)
l, r = mt["lambada"], ref["lambada"]
assert l["examples"] == r["examples"] > 50, (l, r)
# decisions are exact unless two logits tie within rounding (the reference reports the closest)
if r["min_margin"] > 1e-4:
    assert l["correct"] == r["correct"] and l["correct_strict"] == r["correct_strict"], (l, r)
assert 0 < r["correct_strict"] < r["examples"] and 0 < r["correct"] < r["examples"], r
for k in ("accuracy", "accuracy_strict"):
    assert abs(l["metrics"][k] - r[k]) <= 1e-12, k'
}

@test "--wikitext applies Megatron's detokenizer chosen by the path, as the PyTorch reference does" {
	need_torch
	run -0 mt-eval -q --load "$F/ck" --wikitext "$F/wiki.test.tokens" --json
	echo "$output" > mt.json
	run -0 mt-eval -q --load "$F/ck" --wikitext "$F/wiki.test.tokens" --json --detokenizer none
	echo "$output" > none.json
	"$MT_ROOT/tests/reference/torch_eval.py" "$F/ck/iter_0000150/model.h5" --vocab-file "$F/bpe-vocab.json" \
		--merge-file "$F/bpe-merges.txt" --wikitext "$F/wiki.test.tokens" --micro-batch-size 4 > ref.json
	cat mt.json none.json ref.json
	check 'import json
mt, none, ref = (json.load(open(f)) for f in ("mt.json", "none.json", "ref.json"))
assert mt["detokenizer"] == ref["detokenizer"] == "wikitext" and none["detokenizer"] == "none"
assert none["tokens"] > mt["tokens"] + 100, "the detokenizer removes spaces, so fewer tokens"
assert mt["tokens"] == ref["tokens"] and mt["words"] == ref["words"] == none["words"], (mt, ref)
for k in ("token_loss", "word_ppl"):
    assert abs(mt["metrics"][k] - ref[k]) <= 1e-5 * ref[k], (k, mt["metrics"][k], ref[k])'
}

@test "the human table labels token and word perplexity; -q keeps stderr quiet; --json is one object per task" {
	run -0 --separate-stderr mt-eval -q --load "$F/ck" --wikitext "$F/wiki.txt" --valid
	[ -z "$stderr" ]
	[[ ${lines[0]} == "iteration"*"task"*"metric"*"value"*"tokens"*"seconds"* ]]
	[[ $output == *"wikitext  token_ppl"* ]]
	[[ $output == *"wikitext  word_ppl"* ]]
	[[ $output == *"valid     loss"* ]]
	run -0 mt-eval -q --load "$F/ck" --wikitext "$F/wiki.txt" --valid --lambada "$F/lambada.jsonl" --json
	[ "${#lines[@]}" -eq 3 ]
	check 'import json, sys
for l in sys.argv[1].splitlines():
    d = json.loads(l)
    for k in ("checkpoint", "iteration", "task", "metrics", "tokens", "dataset_hash", "hash_of", "seconds"):
        assert k in d, (k, d)' "$output"
}

# one line per (iteration, task), every line a JSON object; prints the count
ledger_ok() {
	python3 -c 'import json, sys, collections
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "the ledger ends with a newline"
keys = collections.Counter((d["iteration"], d["task"]) for d in map(json.loads, lines[:-1]))
assert all(n == 1 for n in keys.values()), keys
print(len(keys))' "$1"
}

@test "--watch: two concurrent runs evaluate each checkpoint once; incomplete ones are skipped; nothing new exits 0" {
	cp -r "$F/ck" ck
	mkdir ck/iter_0000200.tmp.4242 && echo junk > ck/iter_0000200.tmp.4242/model.h5
	W=(--watch ck --ledger ledger.jsonl --valid --wikitext "$F/wiki.txt" --lambada "$F/lambada.jsonl" --json)
	mt-eval "${W[@]}" > a.out 2> a.err &
	a=$!
	mt-eval "${W[@]}" > b.out 2> b.err &
	b=$!
	wait $a
	wait $b
	cat a.err b.err
	[ "$(ledger_ok ledger.jsonl)" -eq 9 ]
	[ "$(cat a.out b.out | wc -l)" -eq 9 ]
	grep -q 'holds .ledger.jsonl.lock' a.err b.err
	! grep -q 200 ledger.jsonl
	# --wait: the second run waits, then finds nothing new
	mt-eval "${W[@]}" --wait > c.out 2> c.err &
	c=$!
	run -0 --separate-stderr mt-eval "${W[@]}" --wait
	wait $c
	[ "$(ledger_ok ledger.jsonl)" -eq 9 ]
	[[ $stderr == *"nothing new under 'ck'"* ]] || grep -q "nothing new" c.err
	# a new checkpoint and a new task are picked up; old work is not redone
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path "$F/c_text_document" --tokenizer-type GPT2BPETokenizer \
		--vocab-file "$F/bpe-vocab.json" --merge-file "$F/bpe-merges.txt" --split 90,8,2 --data-cache-path "$F/cache" --make-vocab-size-divisible-by 128 \
		--micro-batch-size 4 --global-batch-size 8 --train-iters 160 --lr 3e-3 --save ck --load ck --save-interval 50
	run -0 --separate-stderr mt-eval "${W[@]}" --test
	[ "${#lines[@]}" -eq 7 ] # iteration 160: 4 tasks; 50, 100, 150: the test split only
	[ "$(ledger_ok ledger.jsonl)" -eq 16 ]
	run -0 --separate-stderr mt-eval "${W[@]}" --test
	[ -z "$output" ]
	[[ $stderr == *"nothing new"* ]]
}

@test "--watch: a run killed mid-evaluation leaves a valid ledger and the next run completes the work; a torn line is repaired" {
	cp -r "$F/ck" ck
	python3 -c 'open("big.txt", "w").write(open(__import__("sys").argv[1]).read() * 6)' "$F/wiki.txt"
	W=(--watch ck --ledger ledger.jsonl --valid --wikitext big.txt --micro-batch-size 1)
	mt-eval -q "${W[@]}" > /dev/null &
	pid=$!
	for _ in $(seq 1 200); do [ -s ledger.jsonl ] && break; sleep 0.05; done
	kill -9 "$pid"
	wait "$pid" || true
	n=$(ledger_ok ledger.jsonl)
	echo "lines after the kill: $n"
	[ "$n" -ge 1 ] && [ "$n" -lt 6 ]
	# a torn last line, as a crash in the middle of a write would leave
	printf '{"iteration": 150, "task": "wik' >> ledger.jsonl
	run -0 --separate-stderr mt-eval "${W[@]}"
	[[ $stderr == *"cut off a torn last line of 31 bytes"* ]]
	[ "$(ledger_ok ledger.jsonl)" -eq 6 ]
}

@test "errors: missing checkpoint, malformed JSON line, no tokenizer known, usage" {
	run -4 --separate-stderr mt-eval --load nowhere --valid
	[[ $stderr == "mt-eval: error: "*"nowhere"* ]]
	printf '{"text": "a b c"}\n\n{"text": oops}\n' > bad.jsonl
	run -3 --separate-stderr mt-eval --load "$F/ck" --lambada bad.jsonl
	[[ $stderr == *"bad.jsonl:3: not JSON"* ]]
	printf '{"text": "a b c"}\n{"title": "x"}\n' > bad.jsonl
	run -3 --separate-stderr mt-eval --load "$F/ck" --lambada bad.jsonl
	[[ $stderr == *"bad.jsonl:2: no \"text\" string"* ]]
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --mock-data --vocab-size 64 --micro-batch-size 2 \
		--train-iters 1 --save mock
	run -2 --separate-stderr mt-eval --load mock --wikitext "$F/wiki.txt"
	[[ $stderr == *"records no tokenizer: give --tokenizer-type"* ]]
	run -4 --separate-stderr mt-eval --load "$F/ck" --wikitext missing.txt
	[[ $stderr == *"cannot open 'missing.txt'"* ]]
	run -2 --separate-stderr mt-eval --load "$F/ck"
	[[ $stderr == *"no task"* ]]
	run -2 --separate-stderr mt-eval --load "$F/ck" --watch ck --valid
	[[ $stderr == *"one of them"* ]]
	run -2 --separate-stderr mt-eval --watch ck --valid
	[[ $stderr == *"--watch needs --ledger"* ]]
	run -2 --separate-stderr mt-eval --load "$F/ck" --wikitext "$F/wiki.txt" --overlapping-eval 65
	[[ $stderr == *"more than the seq-length"* ]]
}
