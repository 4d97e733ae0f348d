#!/usr/bin/env bats
# mt-generate on a GPU: the CUDA engine against the CPU one on small trained checkpoints,
# GPT-2 style and Llama style (rope, GQA, SwiGLU, RMSNorm, untied). In fp32, greedy and
# sampled generation give the CPU's tokens and log-probabilities within 1e-4, batched
# or not, and sampling on the GPU (without log-probabilities) the CPU's tokens; bf16
# (the default on cuda) stays close; the default device; the server on the
# GPU answers as the CPU's; option errors. Every test is tagged gpu and skips where no
# GPU is found (CI has none).
load helpers

setup_file() {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || return 0
	cd "$BATS_FILE_TMPDIR"
	export OMP_NUM_THREADS=4
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 1500 > demo.jsonl
	mt-tokenize train -q --input demo.jsonl --vocab-size 300 --output-prefix T
	TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file T-vocab.json --merge-file T-merges.txt)
	mt-tokenize -q --input demo.jsonl --output-prefix d "${TOK[@]}" --append-eod
	for style in tiny llama-tiny; do
		mt-train -q --device cpu --config "$MT_ROOT/share/configs/$style.conf" --data-path d_text_document "${TOK[@]}" \
			--split 100,0,0 --data-cache-path cache --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
			--lr 5e-3 --save "ck-$style"
	done
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	export OMP_NUM_THREADS=4
	PROMPTS=("Once upon a time" "One day Anna went to the" "The dog" "x" "She looked at the big red ball and")
}

# same A.jsonl B.jsonl TOL [PREFIX]: the same tokens (all of them, or the first PREFIX of
# each prompt); the prompts' log-probabilities and the generated ones while the tokens
# agree within TOL relative (of max(1, |value|))
same() {
	python3 - "$@" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[3])
prefix = int(sys.argv[4]) if len(sys.argv) > 4 else None
assert len(a) == len(b) > 0, (len(a), len(b))
worst, agree = 0.0, 0
for x, y in zip(a, b):
    assert x["prompt"] == y["prompt"]
    n = len(y["tokens"]) if prefix is None else min(prefix, len(y["tokens"]))
    if x["tokens"][:n] != y["tokens"][:n]:
        print(f"prompt {y['prompt']!r}: {x['tokens']} against {y['tokens']}")
        sys.exit(1)
    agree += x["tokens"] == y["tokens"]
    m = 0  # the generated log-probabilities are comparable while the tokens agree
    while m < len(y["tokens"]) and m < len(x["tokens"]) and x["tokens"][m] == y["tokens"][m]:
        m += 1
    pairs = list(zip(x["prompt_logprobs"], y["prompt_logprobs"])) + list(zip(x["logprobs"][:m], y["logprobs"][:m]))
    for u, v in pairs:
        worst = max(worst, abs(u - v) / max(1.0, abs(v)))
print(f"{len(b)} prompts, {agree} with every token equal; log-probabilities: worst relative difference {worst:.3g} (limit {tol})")
sys.exit(0 if worst <= tol else 1)
PY
}

# bats test_tags=gpu
@test "gpu: fp32 greedy and sampled generation equal the CPU's tokens, log-probabilities within 1e-4" {
	need_gpu
	for style in tiny llama-tiny; do
		for s in "--temperature 0" "--top-k 5 --seed 9" "--top-p 0.9 --temperature 0.8 --seed 3"; do
			# shellcheck disable=SC2086
			mt-generate -q --load "$F/ck-$style" --device cpu $s --max-tokens 40 --json --logprobs "${PROMPTS[@]}" > cpu.jsonl
			# shellcheck disable=SC2086
			mt-generate -q --load "$F/ck-$style" --device cuda --fp32 $s --max-tokens 40 --json --logprobs "${PROMPTS[@]}" > gpu.jsonl
			# shellcheck disable=SC2086
			mt-generate -q --load "$F/ck-$style" --device cuda --fp32 $s --max-tokens 40 --json --logprobs --batch-size 2 "${PROMPTS[@]}" > gpu2.jsonl
			echo "# $style $s"
			same gpu.jsonl cpu.jsonl 1e-4
			same gpu2.jsonl cpu.jsonl 1e-4
		done
	done
}

# Without --logprobs the CUDA engine samples on the GPU (kernels/sampling.cu) and copies
# back only the ids; with the same random numbers it must choose the CPU's tokens.
# bats test_tags=gpu
@test "gpu: fp32 generation sampled on the GPU (no log-probabilities) gives the CPU's tokens" {
	need_gpu
	for style in tiny llama-tiny; do
		for s in "--temperature 0" "--top-k 5 --seed 9" "--top-p 0.9 --temperature 0.8 --seed 3" "--temperature 1.3 --seed 4"; do
			# shellcheck disable=SC2086
			mt-generate -q --load "$F/ck-$style" --device cpu $s --max-tokens 40 --json "${PROMPTS[@]}" > cpu.jsonl
			# shellcheck disable=SC2086
			mt-generate -q --load "$F/ck-$style" --device cuda --fp32 $s --max-tokens 40 --json "${PROMPTS[@]}" > gpu.jsonl
			# shellcheck disable=SC2086
			mt-generate -q --load "$F/ck-$style" --device cuda --fp32 $s --max-tokens 40 --json --batch-size 2 "${PROMPTS[@]}" > gpu2.jsonl
			echo "# $style $s"
			for f in gpu.jsonl gpu2.jsonl; do
				python3 - cpu.jsonl "$f" <<'PY'
import json, sys
a, b = ([json.loads(l)["tokens"] for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 5, (len(a), len(b))
for x, y in zip(a, b):
    assert x == y, (x, y)
PY
			done
		done
	done
}

# bats test_tags=gpu
@test "gpu: bf16, the default on cuda, stays close to fp32; runs repeat bit for bit; the summary names the engine" {
	need_gpu
	for style in tiny llama-tiny; do
		mt-generate -q --load "$F/ck-$style" --device cpu --temperature 0 --max-tokens 40 --json --logprobs "${PROMPTS[@]}" > cpu.jsonl
		mt-generate -q --load "$F/ck-$style" --temperature 0 --max-tokens 40 --json --logprobs "${PROMPTS[@]}" > default.jsonl
		mt-generate -q --load "$F/ck-$style" --device cuda --bf16 --temperature 0 --max-tokens 40 --json --logprobs "${PROMPTS[@]}" > bf16.jsonl
		# the first tokens agree; near-ties may go the other way later on
		same bf16.jsonl cpu.jsonl 5e-2 3
		same default.jsonl bf16.jsonl 0
	done
	run -0 --separate-stderr mt-generate --load "$F/ck-tiny" --max-tokens 4 "x"
	[[ $stderr == *"engine: cuda bf16, batch 1"*"on the GPU"* ]]
	[[ $stderr == *"1 prompt, 4 tokens generated"*"cuda bf16)"* ]]
	run -0 --separate-stderr mt-generate --load "$F/ck-tiny" --device cuda --fp32 --max-tokens 4 "x"
	[[ $stderr == *"cuda fp32)"* ]]
}

# The server on a free port of 127.0.0.1; every wait is bounded.
start_server() {
	PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	mt-generate --load "$F/ck-llama-tiny" --server "$PORT" --batch-size 2 "$@" 2> server.log &
	SERVER=$!
	for _ in $(seq 1 300); do
		grep -q 'serving PUT /api' server.log 2>/dev/null && return 0
		sleep 0.1
	done
	cat server.log
	return 1
}

teardown() {
	# a failed test leaves no server behind (bats would wait for it)
	[ -z "${SERVER:-}" ] || kill -TERM "$SERVER" 2>/dev/null || true
}

stop_server() {
	kill -TERM "$SERVER"
	for _ in $(seq 1 100); do
		kill -0 "$SERVER" 2>/dev/null || break
		sleep 0.1
	done
	! kill -0 "$SERVER" 2>/dev/null
	wait "$SERVER"
	SERVER=
}

# bats test_tags=gpu
@test "gpu: the server on the GPU answers PUT /api as the CPU's does (fp32, greedy)" {
	need_gpu
	command -v curl >/dev/null || skip "curl is not installed"
	body='{"prompts": ["Once upon a time", "The dog", "x"], "tokens_to_generate": 16, "temperature": 0, "logprobs": true}'
	for dev in cpu "cuda --fp32"; do
		# shellcheck disable=SC2086
		start_server --device $dev
		curl -sS --max-time 30 -X PUT -H 'Content-Type: application/json' --data-binary "$body" \
			"http://127.0.0.1:$PORT/api" > "answer-${dev%% *}.json"
		stop_server
	done
	grep -q "engine: cuda fp32" server.log
	python3 - <<'PY'
import json
a, b = json.load(open("answer-cuda.json")), json.load(open("answer-cpu.json"))
assert a["text"] == b["text"] and a["tokens"] == b["tokens"], (a, b)
worst = max(abs(u - v) / max(1, abs(v)) for x, y in zip(a["logprobs"], b["logprobs"]) for u, v in zip(x, y))
print("same texts and tokens; worst log-probability difference", worst)
assert worst <= 1e-4
PY
}

# bats test_tags=gpu
@test "gpu: --device takes only cuda or cpu; --bf16 needs cuda; --bf16 and --fp32 exclude each other" {
	need_gpu
	run -2 --separate-stderr mt-generate --load "$F/ck-tiny" --device tpu "x"
	[[ $stderr == *"--device must be cuda or cpu"* ]]
	run -2 --separate-stderr mt-generate --load "$F/ck-tiny" --device cpu --bf16 "x"
	[[ $stderr == *"--bf16 needs --device cuda"* ]]
	run -2 --separate-stderr mt-generate --load "$F/ck-tiny" --bf16 --fp32 "x"
	[[ $stderr == *"cannot be used together"* ]]
}
