#!/usr/bin/env bats
# mt-generate on small trained checkpoints: against an independent PyTorch greedy loop,
# batching, sampling, stops, inputs and outputs, errors, and the PUT /api server.
load helpers
cpu_only

# Tiny models: one thread is fastest (OpenMP threads on a busy machine made training 15x
# slower); the batching test runs one comparison with two threads as well.
export OMP_NUM_THREADS=1

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 1500 > demo.jsonl
	mt-tokenize train -q --input demo.jsonl --vocab-size 300 --output-prefix T
	TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file T-vocab.json --merge-file T-merges.txt)
	mt-tokenize -q --input demo.jsonl --output-prefix d "${TOK[@]}" --append-eod
	for style in tiny llama-tiny; do
		mt-train -q --config "$MT_ROOT/share/configs/$style.conf" --data-path d_text_document "${TOK[@]}" \
			--split 100,0,0 --data-cache-path cache --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
			--lr 5e-3 --save "ck-$style"
	done
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	SERVER=
	GPT=$F/ck-tiny
	LLAMA=$F/ck-llama-tiny
	PROMPTS=("Once upon a time" "One day Anna went to the" "The dog" "x")
}

# a failed test leaves no server behind
teardown() {
	[ -z "$SERVER" ] || kill -KILL "$SERVER" 2>/dev/null || true
}

# tests/reference/*.py run on Debian's /usr/bin/python3 with torch and h5py
need_torch() {
	/usr/bin/python3 -c 'import h5py, numpy, torch' 2>/dev/null ||
		skip "/usr/bin/python3 lacks torch or h5py (scripts/install-deps.sh --test installs them)"
}

field() { # field NAME < json lines: that field of every line, one a line
	python3 -c 'import json,sys; [print(json.dumps(json.loads(l)[sys.argv[1]])) for l in sys.stdin]' "$1"
}

@test "greedy ids and log-probabilities equal an independent PyTorch loop: GPT-2 style" {
	need_torch
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 24 --json --logprobs "${PROMPTS[@]}" > mt.jsonl
	[ "$(wc -l < mt.jsonl)" -eq 4 ]
	run -0 "$MT_ROOT/tests/reference/torch_generate.py" "$GPT" mt.jsonl --max-tokens 24 --eod 299
	echo "$output"
	[[ $output == *"4/4 prompts agree"* ]]
}

@test "greedy ids and log-probabilities equal an independent PyTorch loop: Llama style (rope, GQA, untied)" {
	need_torch
	mt-generate -q --load "$LLAMA" --temperature 0 --max-tokens 24 --json --logprobs "${PROMPTS[@]}" > mt.jsonl
	run -0 "$MT_ROOT/tests/reference/torch_generate.py" "$LLAMA" mt.jsonl --max-tokens 24 --eod 299
	echo "$output"
	[[ $output == *"4/4 prompts agree"* ]]
}

@test "the reference comparison can fail: a changed id is caught" {
	need_torch
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 8 --json "${PROMPTS[0]}" > mt.jsonl
	python3 -c 'import json; d = json.loads(open("mt.jsonl").read()); d["tokens"][3] = (d["tokens"][3] + 1) % 299; print(json.dumps(d))' > bad.jsonl
	run -1 "$MT_ROOT/tests/reference/torch_generate.py" "$GPT" bad.jsonl --max-tokens 8 --eod 299
	[[ $output == *FAIL* ]]
}

@test "a batch of prompts of different lengths gives each prompt's tokens alone, greedy and sampled" {
	for ck in "$GPT" "$LLAMA"; do
		for s in "--temperature 0" "--top-k 5 --seed 9"; do
			# shellcheck disable=SC2086
			mt-generate -q --load "$ck" $s --max-tokens 20 --json "${PROMPTS[@]}" > batch.txt
			# (whole JSON lines: prompt, text, ids, finish reason)
			# the random numbers follow each prompt's index in the run, so "alone" is
			# --batch-size 1: one prefill and one decode loop per prompt
			# shellcheck disable=SC2086
			mt-generate -q --load "$ck" $s --max-tokens 20 --json --batch-size 1 "${PROMPTS[@]}" > alone.txt
			diff batch.txt alone.txt
		done
		# greedy: each prompt in a run of its own gives the same ids
		for i in 0 1 2 3; do
			mt-generate -q --load "$ck" --temperature 0 --max-tokens 20 --json "${PROMPTS[$i]}"
		done > single.txt
		mt-generate -q --load "$ck" --temperature 0 --max-tokens 20 --json "${PROMPTS[@]}" > batch.txt
		diff batch.txt single.txt
		OMP_NUM_THREADS=2 mt-generate -q --load "$ck" --temperature 0 --max-tokens 20 --json "${PROMPTS[@]}" > batch2.txt
		diff batch.txt batch2.txt
	done
}

@test "sampling: the same seed gives the same text, another seed another; top-k 1 and a tiny top-p are greedy" {
	g() { mt-generate -q --load "$GPT" --max-tokens 30 --json "$@" "${PROMPTS[@]}" | field tokens; }
	g --seed 1 > a.txt
	g --seed 1 > b.txt
	g --seed 2 > c.txt
	diff a.txt b.txt
	! diff -q a.txt c.txt
	g --temperature 0 > greedy.txt
	! diff -q a.txt greedy.txt
	g --top-k 1 --temperature 0.7 --seed 3 > k1.txt
	diff greedy.txt k1.txt
	g --top-p 1e-9 --seed 3 > p0.txt
	diff greedy.txt p0.txt
	# top-p 1 drops nothing, top-k at the vocabulary size keeps everything: plain sampling
	g --top-p 1 --seed 1 > p1.txt
	diff a.txt p1.txt
	g --top-k 300 --seed 1 > kv.txt
	diff a.txt kv.txt
	# default: temperature 1, seed 1234
	g > d1.txt
	g --seed 1234 --temperature 1 > d2.txt
	diff d1.txt d2.txt
}

@test "stop strings cut the text before them; the end-of-document id ends a prompt and stays out of the text" {
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 30 --json "${PROMPTS[0]}" > full.jsonl
	text=$(field text < full.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.read()))')
	[ "${#text}" -gt 12 ]
	stop=${text:6:3}
	before=${text%%"$stop"*}
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 30 --json --stop "$stop" --stop "never seen €" "${PROMPTS[0]}" > stop.jsonl
	run -0 python3 -c '
import json, sys
d = json.loads(open("stop.jsonl").read()); full = json.loads(open("full.jsonl").read())
assert d["finish_reason"] == "stop", d
assert d["text"] == sys.argv[1], (d["text"], sys.argv[1])
assert 0 < len(d["tokens"]) < len(full["tokens"]) and full["tokens"][:len(d["tokens"])] == d["tokens"], d
' "$before"
	# text mode: prompt + generation, the stop string left out
	run -0 mt-generate -q --load "$GPT" --temperature 0 --max-tokens 30 --stop "$stop" "${PROMPTS[0]}"
	[ "$output" = "${PROMPTS[0]}$before" ]
	# end of document: make the 5th greedy token the end-of-document id
	eod=$(field tokens < full.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[4])')
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 30 --json --eod-id "$eod" "${PROMPTS[0]}" > eod.jsonl
	run -0 python3 -c '
import json, sys
d = json.loads(open("eod.jsonl").read()); full = json.loads(open("full.jsonl").read()); eod = int(sys.argv[1])
first = full["tokens"].index(eod)
assert d["finish_reason"] == "eod" and d["tokens"] == full["tokens"][:first + 1], d
assert len(d["text"]) < len(full["text"]) and full["text"].startswith(d["text"]), d
' "$eod"
	# --max-tokens ends it otherwise
	run -0 python3 -c 'import json; d = json.loads(open("full.jsonl").read()); assert d["finish_reason"] == "length" and len(d["tokens"]) == 30, d'
}

@test "--json fields and --logprobs: one log-probability per token after the first, all <= 0" {
	mt-generate -q --load "$LLAMA" --max-tokens 5 --json --logprobs "${PROMPTS[@]:0:2}" > out.jsonl
	run -0 python3 -c '
import json
for l in open("out.jsonl"):
    d = json.loads(l)
    assert set(d) == {"prompt", "text", "tokens", "prompt_tokens", "finish_reason", "logprobs", "prompt_logprobs"}, d
    assert len(d["logprobs"]) == len(d["tokens"]) == 5 and len(d["prompt_logprobs"]) == len(d["prompt_tokens"]) - 1
    assert all(x <= 0 for x in d["logprobs"] + d["prompt_logprobs"])
print("ok")'
	mt-generate -q --load "$LLAMA" --max-tokens 5 --json "${PROMPTS[0]}" > nolp.jsonl
	run -0 python3 -c 'import json; d = json.loads(open("nolp.jsonl").read()); assert "logprobs" not in d'
	run -2 --separate-stderr mt-generate -q --load "$LLAMA" --logprobs "x"
	[[ $stderr == *"--logprobs needs --json"* ]]
}

@test "prompts from a file, JSON lines and stdin give what the arguments give" {
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 8 "${PROMPTS[@]}" > args.txt
	[ "$(wc -l < args.txt)" -eq 4 ]
	printf '%s\n' "${PROMPTS[0]}" "" "${PROMPTS[1]}" "${PROMPTS[2]}" "${PROMPTS[3]}" > p.txt
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 8 --prompts-file p.txt > file.txt
	diff args.txt file.txt
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 8 < p.txt > stdin.txt
	diff args.txt stdin.txt
	python3 -c 'import json,sys; [print(json.dumps({"prompt" if i % 2 else "text": p, "id": i})) for i, p in enumerate(sys.argv[1:])]' "${PROMPTS[@]}" > p.jsonl
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 8 --prompts-file p.jsonl --jsonl > jsonl.txt
	diff args.txt jsonl.txt
	echo '{"title": 1}' > bad.jsonl
	run -3 --separate-stderr mt-generate -q --load "$GPT" --prompts-file bad.jsonl --jsonl
	[[ $stderr == *"bad.jsonl' line 1"* ]]
}

@test "errors: usage, a prompt too long for the positions, a missing checkpoint" {
	run -0 mt-generate --help
	[[ $output == *"--server PORT"*"--tokenizer-model FILE"*"common options:"* ]]
	[ "$(grep -A1 -- "--tokenizer-model FILE" <<<"$output" | tail -n 1)" = "" ]
	run -2 --separate-stderr mt-generate "x"
	[[ $stderr == *"--load CKPT is required"* ]]
	run -2 --separate-stderr mt-generate --load "$GPT" --top-k 5 --top-p 0.5 "x"
	[[ $stderr == *"cannot be used together"* ]]
	run -2 --separate-stderr mt-generate --load "$GPT" --temperature -1 "x"
	run -2 --separate-stderr mt-generate --load "$GPT" --top-p 2 "x"
	run -3 --separate-stderr mt-generate --load "$GPT" --max-tokens 60 "${PROMPTS[1]}"
	[[ $stderr == *"prompt 1: "*"exceed the model's 64 positions"* ]]
	run -4 --separate-stderr mt-generate --load nowhere "x"
	[[ $stderr == "mt-generate: error: "* ]]
	run -0 --separate-stderr mt-generate --load "$GPT" --max-tokens 4 "x"
	[[ $stderr == *"1 prompt, 4 tokens generated"* ]]
}

# The server on a free port of 127.0.0.1; every wait is bounded.
start_server() {
	PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	# fd 3 closed: bats waits for whoever holds it, a server a failed test left too
	mt-generate --load "$GPT" --server "$PORT" --batch-size 2 --max-body-bytes 4096 "$@" 2> server.log 3>&- &
	SERVER=$!
	for _ in $(seq 1 100); do
		grep -q 'serving PUT /api' server.log 2>/dev/null && return 0
		sleep 0.05
	done
	cat server.log
	return 1
}

stop_server() {
	kill -TERM "$SERVER"
	for _ in $(seq 1 100); do
		kill -0 "$SERVER" 2>/dev/null || break
		sleep 0.05
	done
	! kill -0 "$SERVER" 2>/dev/null
	local rc=0
	wait "$SERVER" || rc=$?
	SERVER=
	return $rc
}

put() { # put BODY [PATH [METHOD]]: prints "STATUS BODY"
	local out
	out=$(curl -sS --max-time 30 -X "${3:-PUT}" -H 'Content-Type: application/json' --data-binary "$1" \
		-w '\n%{http_code}' "http://127.0.0.1:$PORT${2:-/api}")
	echo "${out##*$'\n'} ${out%$'\n'*}"
}

@test "server: Megatron's PUT /api answers as the command line does; a bad request is 400 with a JSON error" {
	start_server
	run -0 put '{"prompts": ["Once upon a time", "The dog", "x"], "tokens_to_generate": 8, "temperature": 0, "logprobs": true}'
	[[ $output == "200 "* ]]
	echo "${output#200 }" > resp.json
	mt-generate -q --load "$GPT" --temperature 0 --max-tokens 8 "Once upon a time" "The dog" "x" > cli.txt
	run -0 python3 -c '
import json
d = json.load(open("resp.json"))
cli = open("cli.txt").read().split("\n")[:3]
assert d["text"] == cli, (d["text"], cli)
for toks, segs, lp in zip(d["tokens"], d["segments"], d["logprobs"]):
    assert len(segs) == len(toks) and len(lp) == len(toks) - 1 and all(x <= 0 for x in lp)
print("ok")'
	# each invalid request: 400 and {"error": ...}
	bad=('{"prompts": ' '[1, 2]' '{"tokens_to_generate": 4}' '{"prompts": "x"}' '{"prompts": [3]}' '{"prompts": []}'
		'{"prompts": ["x"], "tokens_to_generate": "4"}' '{"prompts": ["x"], "tokens_to_generate": -1}'
		'{"prompts": ["x"], "temperature": 101}' '{"prompts": ["x"], "temperature": "hot"}'
		'{"prompts": ["x"], "top_k": 1001}' '{"prompts": ["x"], "top_p": 1.5}' '{"prompts": ["x"], "top_k": 4, "top_p": 0.5}'
		'{"prompts": ["x"], "logprobs": 1}' '{"prompts": ["x"], "tokens_to_generate": 0}'
		'{"prompts": ["x"], "tokens_to_generate": 64}' '{"prompts": ["x"], "max_len": 5}' '{"prompts": ["x"], "add_BOS": 3}'
		'{"prompts": [""]}' "{\"prompts\": [$(python3 -c 'print(",".join(["\"a\""] * 129))')]}")
	for b in "${bad[@]}"; do
		run -0 put "$b"
		echo "$b -> $output"
		[[ $output == "400 {\"error\": \""* || $output == '400 {"error":"'* ]]
	done
	# logprobs only, nothing generated: Megatron's scoring use
	run -0 put '{"prompts": ["Once upon a time"], "tokens_to_generate": 0, "logprobs": true}'
	[[ $output == "200 "* ]]
	# sampling with a request seed is repeatable
	run -0 put '{"prompts": ["The dog", "x", "One day"], "tokens_to_generate": 6, "random_seed": 4}'
	first=$output
	run -0 put '{"prompts": ["The dog", "x", "One day"], "tokens_to_generate": 6, "random_seed": 4}'
	[ "$output" = "$first" ]
	stop_server
	grep -q 'PUT /api 200' server.log
	grep -q 'SIGTERM: stopping' server.log
}

@test "server: oversized bodies are 413, other methods 405 with Allow: PUT, other paths 404; SIGINT stops it" {
	start_server
	python3 -c 'import json; print(json.dumps({"prompts": ["x" * 5000]}))' > big.json
	run -0 put "@big.json"
	[[ $output == "413 "*"limit of 4096 bytes"* ]]
	# a chunked upload (no Content-Length) over the limit too
	run -0 bash -c "curl -sS --max-time 30 -X PUT -H 'Transfer-Encoding: chunked' --data-binary @big.json -w ' %{http_code}' http://127.0.0.1:$PORT/api"
	[[ $output == *'"error"'*" 413" ]]
	run -0 put '{}' /api GET
	[[ $output == "405 "*'"error"'* ]]
	run -0 bash -c "curl -sS --max-time 30 -o /dev/null -D - -X POST http://127.0.0.1:$PORT/api | tr -d '\r'"
	[[ $output == *"Allow: PUT"* ]]
	run -0 put '{"prompts": ["x"]}' /completions POST
	[[ $output == "404 "*'"error"'* ]]
	run -0 put '{"prompts": ["x"]}' /
	[[ $output == "404 "* ]]
	# still serving after all that
	run -0 put '{"prompts": ["x"], "tokens_to_generate": 2}'
	[[ $output == "200 "* ]]
	kill -INT "$SERVER"
	for _ in $(seq 1 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.05; done
	wait "$SERVER"
	SERVER=
	grep -q 'SIGINT: stopping' server.log
}

@test "server: binds 127.0.0.1 by default; --host takes another numeric address" {
	start_server
	grep -q 'http://127.0.0.1:' server.log
	if command -v ss >/dev/null; then
		run -0 ss -ltn "sport = :$PORT"
		[[ $output == *"127.0.0.1:$PORT"* ]]
	fi
	stop_server
	run -2 --separate-stderr mt-generate --load "$GPT" --server 1 --host example.org
	[[ $stderr == *"not a numeric IPv4 or IPv6 address"* ]]
}
