#!/usr/bin/env bash
# mt-generate --server under a slowloris crowd: IDLE connections (default 10000) that send
# half a header and then nothing, held open while REQUESTS (default 50) concurrent real
# PUT /api requests must get the command line's greedy answers; prints the client's line
# (answers, wall time, slowest request, idle connections still open) and the server's
# peak RSS. A tiny CPU model (10 steps on the demo corpus), so the time is the server's.
#   bench/server.sh [IDLE [REQUESTS]]     env: BUILD (default build), TIMEOUT (--server-timeout, 60)
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=${1:-10000}
REQUESTS=${2:-50}
B=$(cd "${BUILD:-build}/bin" && pwd)
ROOT=$PWD
W=$(mktemp -d)
trap 'kill "$SERVER" 2>/dev/null || true; rm -rf "$W"' EXIT
SERVER=
cd "$W"
export OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=
python3 "$ROOT/share/demo/make-corpus.py" --docs 400 > demo.jsonl
"$B/mt-tokenize" train -q --input demo.jsonl --vocab-size 300 --output-prefix T
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file T-vocab.json --merge-file T-merges.txt)
"$B/mt-tokenize" -q --input demo.jsonl --output-prefix d "${TOK[@]}" --append-eod
"$B/mt-train" -q --config "$ROOT/share/configs/tiny.conf" --data-path d_text_document "${TOK[@]}" --split 100,0,0 \
	--data-cache-path cache --micro-batch-size 4 --global-batch-size 4 --train-iters 10 --lr 5e-3 --save ck
prompts=("Once upon a time" "The dog" "One day Anna went to the" "x" "She was happy")
"$B/mt-generate" -q --load ck --temperature 0 --max-tokens 8 --json "${prompts[@]}" > cli.jsonl
python3 -c '
import json, sys
for p, l in zip(sys.argv[1:], open("cli.jsonl")):
    print(json.dumps({"prompt": p, "text": p + json.loads(l)["text"]}))' "${prompts[@]}" > expect.jsonl
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
/usr/bin/time -v "$B/mt-generate" --load ck --server "$PORT" --server-timeout "${TIMEOUT:-60}" 2> server.log &
SERVER=$!
for _ in $(seq 1 200); do grep -q 'serving PUT /api' server.log && break; sleep 0.05; done
grep 'connections:' server.log
rc=0
/usr/bin/python3 "$ROOT/tests/reference/hostile_client.py" --port "$PORT" --idle "$IDLE" --requests "$REQUESTS" \
	--expect expect.jsonl --within 60 || rc=$?
SRV=$(pgrep -P "$SERVER" mt-generate || echo "$SERVER")
kill -TERM "$SRV"
wait "$SERVER" || true
SERVER=
echo "server peak RSS: $(sed -n 's/^.*Maximum resident set size (kbytes): //p' server.log) kB"
exit $rc
