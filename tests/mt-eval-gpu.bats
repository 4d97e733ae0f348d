#!/usr/bin/env bats
# mt-eval on a GPU: --valid, --wikitext and --lambada on the CUDA backend against the CPU
# run of the same checkpoint (fp32: losses within 1e-5 relative, the same counts of right
# answers; a partial last micro-batch; bf16 close), the default device, and a bad --device.
# Every test is tagged gpu and skips where no GPU is found (CI has none).
load helpers

setup_file() {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || return 0
	cd "$BATS_FILE_TMPDIR"
	export OMP_NUM_THREADS=4
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 600 > c.jsonl
	mt-tokenize train -q --input c.jsonl --vocab-size 400 --output-prefix bpe
	mt-tokenize -q --input c.jsonl --json-keys text --tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json \
		--merge-file bpe-merges.txt --append-eod --output-prefix c
	# vocabulary 400 padded to 512: the text tasks score over the real ids, --valid over all
	mt-train -q --device cpu --config "$MT_ROOT/share/configs/tiny.conf" --data-path "$PWD/c_text_document" \
		--tokenizer-type GPT2BPETokenizer --vocab-file bpe-vocab.json --merge-file bpe-merges.txt --split 90,8,2 \
		--make-vocab-size-divisible-by 128 --data-cache-path "$PWD/cache" --micro-batch-size 4 \
		--global-batch-size 8 --train-iters 60 --lr 3e-3 --eval-interval 60 --eval-iters 4 --save ck --save-interval 60
	python3 - <<'PY'
import json
docs = [json.loads(l)["text"] for l in open("c.jsonl")]
open("wiki.txt", "w").write(" ".join(docs[:30]) + "\n")
with open("lambada.jsonl", "w") as f:
    for t in docs[300:600]:
        i = t.find(" looked at ")
        if i >= 0:
            f.write(json.dumps({"text": t[: t.find(" and", i)]}) + "\n")
PY
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	export OMP_NUM_THREADS=4
}

# same A.jsonl B.jsonl TOL: every task's loss-like metrics within TOL (relative), counts equal
same() {
	python3 - "$@" <<'PY'
import json, sys
a = {d["task"]: d for d in map(json.loads, open(sys.argv[1]))}
b = {d["task"]: d for d in map(json.loads, open(sys.argv[2]))}
tol = float(sys.argv[3])
assert sorted(a) == sorted(b) == ["lambada", "valid", "wikitext"], (sorted(a), sorted(b))
worst = 0
for t in a:
    for k, v in b[t]["metrics"].items():
        if k.startswith("accuracy"):
            continue
        d = abs(a[t]["metrics"][k] - v) / abs(v)
        print(f"{t} {k}: {a[t]['metrics'][k]:.9g} against {v:.9g} (relative {d:.2g})")
        worst = max(worst, d)
    assert a[t]["tokens"] == b[t]["tokens"], t
l, m = a["lambada"], b["lambada"]
print(f"lambada correct {l['correct']} / {l['correct_strict']} against {m['correct']} / {m['correct_strict']} of {m['examples']}")
if tol <= 1e-5:
    assert l["correct"] == m["correct"] and l["correct_strict"] == m["correct_strict"], (l, m)
assert m["examples"] > 20 and 0 < m["correct"], m
print(f"worst relative difference {worst:.3g} (limit {tol})")
sys.exit(0 if worst <= tol else 1)
PY
}

TASKS=(--valid --eval-samples 30 --wikitext "$BATS_FILE_TMPDIR/wiki.txt" --lambada "$BATS_FILE_TMPDIR/lambada.jsonl" --json -q)

# bats test_tags=gpu
@test "gpu: --valid, --wikitext and --lambada on the GPU equal the CPU run (fp32 within 1e-5, same right answers)" {
	need_gpu
	mt-eval --load "$F/ck" "${TASKS[@]}" --device cpu > cpu.jsonl
	mt-eval --load "$F/ck" "${TASKS[@]}" --device cuda > gpu.jsonl
	cat cpu.jsonl gpu.jsonl
	same gpu.jsonl cpu.jsonl 1e-5
	# a last micro-batch of 2 rows (30 = 4 x 7 + 2) and of other sizes: the same numbers
	mt-eval --load "$F/ck" "${TASKS[@]}" --device cuda --micro-batch-size 7 > gpu7.jsonl
	same gpu7.jsonl cpu.jsonl 1e-5
	# the default device is the GPU when one is visible
	mt-eval --load "$F/ck" "${TASKS[@]}" > default.jsonl
	same default.jsonl gpu.jsonl 0
	# two runs are bit-identical
	mt-eval --load "$F/ck" "${TASKS[@]}" --device cuda > again.jsonl
	same again.jsonl gpu.jsonl 0
}

# bats test_tags=gpu
@test "gpu: --bf16 stays close to fp32; --device takes only cuda or cpu; --bf16 needs cuda" {
	need_gpu
	mt-eval --load "$F/ck" "${TASKS[@]}" --device cpu > cpu.jsonl
	mt-eval --load "$F/ck" "${TASKS[@]}" --device cuda --bf16 > bf16.jsonl
	same bf16.jsonl cpu.jsonl 2e-2
	run mt-eval --load "$F/ck" --valid --device tpu
	[ "$status" -eq 2 ]
	[[ $output == *"--device must be cuda or cpu"* ]]
	run mt-eval --load "$F/ck" --valid --device cpu --bf16
	[ "$status" -eq 2 ]
	[[ $output == *"--bf16 needs --device cuda"* ]]
}
