#!/usr/bin/env bats
# mt-generate --server's OpenAI-compatible routes, called through OpenAI's official npm
# client (tests/reference/openai-client.js): completions as the command line generates
# them, logprobs of an echoed prompt equal to mt's own forward pass (mt-logprobs) and to
# mt-eval --multiple-choice's log-likelihoods, n > 1 with a seed, stop strings, errors in
# OpenAI's shape, a malformed body, and vLLM's tokenizer routes that lm-eval looks for.
load helpers
cpu_only

export OMP_NUM_THREADS=1
REF=$MT_ROOT/tests/reference

setup_file() {
	"$REF/fetch.sh"
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 1500 > demo.jsonl
	mt-tokenize train -q --input demo.jsonl --vocab-size 300 --output-prefix T
	TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file T-vocab.json --merge-file T-merges.txt)
	mt-tokenize -q --input demo.jsonl --output-prefix d "${TOK[@]}" --append-eod
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path d_text_document "${TOK[@]}" \
		--split 100,0,0 --data-cache-path cache --micro-batch-size 4 --global-batch-size 4 --train-iters 50 \
		--lr 5e-3 --save tiny
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	CK=$F/tiny
}

teardown() {
	[ -z "${SERVER:-}" ] || stop_server
}

# The server on a free port of 127.0.0.1; every wait is bounded.
start_server() {
	PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	mt-generate --load "$CK" --server "$PORT" --batch-size 3 --max-body-bytes 8192 "$@" 2> server.log 3>&- &
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
	wait "$SERVER" || true
	SERVER=
}

# client CALLS...: each argument one call line for openai-client.js; one answer a line
client() {
	printf '%s\n' "$@" | node "$REF/openai-client.js" "http://127.0.0.1:$PORT/v1"
}

# raw METHOD PATH [BODY]: "STATUS BODY" with curl
raw() {
	local out
	out=$(curl -sS --max-time 30 -X "$1" -H 'Content-Type: application/json' ${3+--data-binary "$3"} \
		-w '\n%{http_code}' "http://127.0.0.1:$PORT$2")
	echo "${out##*$'\n'} ${out%$'\n'*}"
}

@test "openai client: models, and completions equal to the command line's, text and token-id prompts" {
	start_server --served-model-name tiny-gpt
	client '{"call":"models"}' '{"call":"model","params":{"id":"tiny-gpt"}}' \
		'{"call":"completions","params":{"model":"tiny-gpt","prompt":["Once upon a time","The dog"],"max_tokens":12,"temperature":0}}' \
		'{"call":"completions","params":{"model":"tiny-gpt","prompt":"Once upon a time","max_tokens":12,"temperature":0,"logprobs":3}}' \
		> answers.jsonl
	mt-generate -q --load "$CK" --temperature 0 --max-tokens 12 --json "Once upon a time" "The dog" > cli.jsonl
	run -0 python3 - <<'EOF'
import json
a = [json.loads(l) for l in open("answers.jsonl")]
cli = [json.loads(l) for l in open("cli.jsonl")]
assert a[0]["data"][0]["id"] == "tiny-gpt" and a[0]["data"][0]["object"] == "model", a[0]
assert a[1]["id"] == "tiny-gpt", a[1]
r = a[2]
assert r["object"] == "text_completion" and r["model"] == "tiny-gpt" and r["id"].startswith("cmpl-"), r
assert isinstance(r["created"], int), r
assert [c["index"] for c in r["choices"]] == [0, 1], r
for c, want in zip(r["choices"], cli):
    assert c["text"] == want["text"], (c, want)
    assert c["logprobs"] is None and c["finish_reason"] == "length", c
u = r["usage"]
assert u["prompt_tokens"] == sum(len(w["prompt_tokens"]) for w in cli), u
assert u["completion_tokens"] == 24 and u["total_tokens"] == u["prompt_tokens"] + 24, u
# logprobs of the generated tokens: the greedy token is the top one; offsets count characters
c = a[3]["choices"][0]
lp = c["logprobs"]
assert c["text"] == cli[0]["text"], c
assert len(lp["tokens"]) == 12 and "".join(lp["tokens"]) == c["text"], lp
assert lp["text_offset"][0] == 0 and lp["text_offset"][-1] == len(c["text"]) - len(lp["tokens"][-1]), lp
for t, x, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
    assert x <= 0 and 1 <= len(top) <= 3 and top[t] == x == max(top.values()), (t, x, top)
print("ok")
EOF
	[ "$output" = ok ]
	# token ids as the prompt give what the text gives
	ids=$(python3 -c 'import json; print(json.dumps(json.loads(open("cli.jsonl").readline())["prompt_tokens"]))')
	client "{\"call\":\"completions\",\"params\":{\"model\":\"x\",\"prompt\":[$ids],\"max_tokens\":12,\"temperature\":0}}" > ids.jsonl
	run -0 python3 -c '
import json
a = json.loads(open("ids.jsonl").read()); w = json.loads(open("cli.jsonl").readline())
assert a["choices"][0]["text"] == w["text"], (a, w); print("ok")'
}

@test "echo with logprobs and max_tokens 0 (lm-eval's loglikelihood): each token's value is mt's forward pass's, the sums mt-eval's" {
	start_server
	text="Once upon a time there was a red bird. It"
	client "{\"call\":\"completions\",\"params\":{\"model\":\"tiny\",\"prompt\":\"$text\",\"max_tokens\":0,\"echo\":true,\"logprobs\":1,\"temperature\":0}}" \
		"{\"call\":\"completions\",\"params\":{\"model\":\"tiny\",\"prompt\":\"$text\",\"max_tokens\":1,\"echo\":true,\"logprobs\":1,\"temperature\":0}}" > echo.jsonl
	raw POST /tokenize "{\"prompt\": \"$text\"}" > tok.txt
	ids=$(python3 -c 'import json; s = open("tok.txt").read(); assert s.startswith("200 "), s; print(",".join(map(str, json.loads(s[4:])["tokens"])))')
	mt-logprobs "$CK" --ids "$ids" -o ref.npy
	run -0 /usr/bin/python3 - "$ids" "$text" <<'EOF'
import json, sys
import numpy as np
ids = [int(x) for x in sys.argv[1].split(",")]
text = sys.argv[2]
ref = np.load("ref.npy")  # [T, vocab]: log-softmax after each position
zero, one = [json.loads(l)["choices"][0] for l in open("echo.jsonl")]
assert zero["text"] == text and zero["finish_reason"] == "length", zero
lp = zero["logprobs"]
assert "".join(lp["tokens"]) == text and len(lp["tokens"]) == len(ids), lp
assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
worst = 0.0
for j in range(1, len(ids)):
    want = ref[j - 1, ids[j]]
    worst = max(worst, abs(lp["token_logprobs"][j] - want))
    # the top alternative is the forward pass's argmax, with its value
    top = lp["top_logprobs"][j]
    best = int(np.argmax(ref[j - 1]))
    assert abs(max(top.values()) - ref[j - 1, best]) < 1e-4, (j, top, ref[j - 1, best])
assert worst < 1e-4, worst
# max_tokens 1: the same prompt values, one generated token after them (lm-eval drops it)
lp1 = one["logprobs"]
assert len(lp1["tokens"]) == len(ids) + 1 and lp1["token_logprobs"][:-1] == lp["token_logprobs"], lp1
print("ok", worst)
EOF
	echo "$output"
	[[ $output == ok* ]]
	# lm-eval's loglikelihood through the endpoint equals mt-eval --multiple-choice's
	printf '%s\n' '{"context": "Once upon a time there was a red bird.", "choices": ["It was happy.", "The dog ran."], "label": 0}' > mc.jsonl
	mt-eval -q --load "$CK" --multiple-choice mc.jsonl --log-samples samples.jsonl --json > /dev/null
	ctxlen=$(raw POST /tokenize '{"prompt": "Once upon a time there was a red bird."}' | python3 -c 'import json,sys; print(len(json.loads(sys.stdin.read()[4:])["tokens"]))')
	client '{"call":"completions","params":{"model":"m","prompt":["Once upon a time there was a red bird. It was happy.","Once upon a time there was a red bird. The dog ran."],"max_tokens":1,"echo":true,"logprobs":1,"temperature":0,"seed":1234}}' > ll.jsonl
	run -0 python3 - "$ctxlen" <<'EOF'
import json, sys
ctxlen = int(sys.argv[1])
out = json.loads(open("ll.jsonl").read())
mine = json.loads(open("samples.jsonl").read())["loglikelihoods"]
# lm-eval's parse_logprobs: sum(token_logprobs[ctxlen:-1])
got = [sum(c["logprobs"]["token_logprobs"][ctxlen:-1]) for c in sorted(out["choices"], key=lambda c: c["index"])]
assert all(abs(a - b) < 1e-4 for a, b in zip(got, mine)), (got, mine)
print("ok", got, mine)
EOF
	echo "$output"
	[[ $output == ok* ]]
}

@test "n > 1 with a seed: the same request gives the same choices, another seed others; stop strings cut the text" {
	start_server
	req='{"call":"completions","params":{"model":"m","prompt":["Once upon a time","The dog"],"max_tokens":16,"n":3,"seed":7}}'
	client "$req" "$req" '{"call":"completions","params":{"model":"m","prompt":["Once upon a time","The dog"],"max_tokens":16,"n":3,"seed":8}}' > n.jsonl
	run -0 python3 - <<'EOF'
import json
a, b, c = [json.loads(l) for l in open("n.jsonl")]
ta = [x["text"] for x in a["choices"]]
assert [x["index"] for x in a["choices"]] == list(range(6)), a
assert ta == [x["text"] for x in b["choices"]], (a, b)
assert ta != [x["text"] for x in c["choices"]], (a, c)
assert len(set(ta[:3])) > 1, ta  # the samples of one prompt differ from each other
assert a["usage"]["completion_tokens"] == 6 * 16, a["usage"]
print("ok")
EOF
	[ "$output" = ok ]
	# stop: a string or a list; the text ends before it, finish_reason "stop"
	client '{"call":"completions","params":{"model":"m","prompt":"Once upon a time","max_tokens":30,"temperature":0}}' > full.jsonl
	stop=$(python3 -c 'import json; t = json.loads(open("full.jsonl").read())["choices"][0]["text"]; print(t[8:11])')
	client "{\"call\":\"completions\",\"params\":{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":30,\"temperature\":0,\"stop\":$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$stop")}}" \
		"{\"call\":\"completions\",\"params\":{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":30,\"temperature\":0,\"stop\":[\"never seen\", $(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$stop")]}}" > stop.jsonl
	run -0 python3 - "$stop" <<'EOF'
import json, sys
stop = sys.argv[1]
full = json.loads(open("full.jsonl").read())["choices"][0]
assert full["finish_reason"] == "length", full
for l in open("stop.jsonl"):
    c = json.loads(l)["choices"][0]
    assert c["finish_reason"] == "stop" and c["text"] == full["text"][:full["text"].find(stop)], (c, stop)
print("ok")
EOF
	[ "$output" = ok ]
}

@test "errors come in OpenAI's shape through the client; a malformed body, a wrong method and an unknown path too" {
	start_server
	client '{"call":"completions","params":{"model":"m","prompt":"x","max_tokens":-1}}' \
		'{"call":"completions","params":{"model":"m","prompt":"x","temperature":3}}' \
		'{"call":"completions","params":{"model":"m","prompt":[]}}' \
		'{"call":"completions","params":{"model":"m","prompt":[[1, 99999]]}}' \
		'{"call":"completions","params":{"model":"m","prompt":"x","logprobs":21}}' \
		'{"call":"completions","params":{"model":"m","prompt":"x","stream":true}}' \
		'{"call":"completions","params":{"model":"m","prompt":"x","max_tokens":100000}}' \
		'{"call":"completions","params":{"model":"m","prompt":"x","n":2,"best_of":3}}' \
		'{"call":"model","params":{"id":"other"}}' > err.jsonl
	run -0 python3 - <<'EOF'
import json
want = [(400, "max_tokens"), (400, "temperature"), (400, "prompt"), (400, "prompt"), (400, "logprobs"),
        (400, "stream"), (400, "max_tokens"), (400, "best_of"), (404, "model")]
for l, (status, param) in zip(open("err.jsonl"), want):
    d = json.loads(l)
    assert d["status"] == status, (d, status)
    e = d["error"]
    assert sorted(e) == ["code", "message", "param", "type"], e
    assert e["type"] == "invalid_request_error" and e["param"] == param and e["message"], (e, param)
print("ok")
EOF
	[ "$output" = ok ]
	run -0 raw POST /v1/completions '{"prompt": "x", "max_tokens": '
	[[ $output == "400 "* ]]
	echo "${output#400 }" | python3 -c 'import json,sys; e = json.load(sys.stdin)["error"]; assert e["type"] == "invalid_request_error" and "JSON" in e["message"], e'
	run -0 raw POST /v1/completions '[1, 2]'
	[[ $output == "400 "* ]]
	run -0 raw GET /v1/completions
	[[ $output == "405 "* ]]
	echo "${output#405 }" | python3 -c 'import json,sys; e = json.load(sys.stdin)["error"]; assert "POST" in e["message"], e'
	run -0 raw POST /v1/chat/completions '{}'
	[[ $output == "404 "* ]]
	echo "${output#404 }" | python3 -c 'import json,sys; e = json.load(sys.stdin)["error"]; assert e["type"] == "invalid_request_error", e'
	# over the body limit: 413, in OpenAI's shape
	big=$(python3 -c 'import json; print(json.dumps({"prompt": "x" * 9000}))')
	run -0 raw POST /v1/completions "$big"
	[[ $output == "413 "* ]]
	echo "${output#413 }" | python3 -c 'import json,sys; e = json.load(sys.stdin)["error"]; assert "limit" in e["message"], e'
	# Megatron's PUT /api stays, with its own error shape
	run -0 raw PUT /api '{"prompts": ["Once"], "tokens_to_generate": 2}'
	[[ $output == "200 "* ]]
	run -0 raw PUT /api '{"prompts": []}'
	[[ $output == '400 {"error":"'* ]]
	# the server still answers after all that
	run -0 raw GET /v1/models
	[[ $output == "200 "* ]]
}

@test "vLLM's tokenizer routes, which lm-eval's local-completions uses when it finds them" {
	start_server
	run -0 raw GET /tokenizer_info
	[[ $output == "200 "* ]]
	echo "${output#200 }" | python3 -c 'import json,sys; d = json.load(sys.stdin); assert d["eos_token"] == "<|endoftext|>" and d["model_max_length"] > 0, d'
	run -0 raw POST /tokenize '{"prompt": "<|endoftext|>", "add_special_tokens": false}'
	[[ $output == '200 {"tokens":[299],'* ]]
	run -0 raw POST /tokenize '{"prompt": "Once upon a time"}'
	ids=$(echo "${output#200 }" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))')
	mt-generate -q --load "$CK" --max-tokens 0 --json --logprobs "Once upon a time" > p.jsonl
	want=$(python3 -c 'import json; print(json.dumps(json.loads(open("p.jsonl").read())["prompt_tokens"]))')
	[ "$ids" = "$want" ]
	run -0 raw POST /detokenize "{\"tokens\": $ids}"
	[ "$output" = '200 {"prompt":"Once upon a time"}' ]
	run -0 raw POST /detokenize '{"tokens": [100000]}'
	[[ $output == "400 "* ]]
}
