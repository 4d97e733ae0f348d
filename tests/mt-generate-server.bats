#!/usr/bin/env bats
# mt-generate --server against hostile clients: thousands of idle connections that never
# finish their headers (slowloris), the per-connection timeout, the connection limit and
# malformed headers, while real requests keep getting the command line's answers.
load helpers
cpu_only

export OMP_NUM_THREADS=1

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 400 > demo.jsonl
	mt-tokenize train -q --input demo.jsonl --vocab-size 300 --output-prefix T
	TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file T-vocab.json --merge-file T-merges.txt)
	mt-tokenize -q --input demo.jsonl --output-prefix d "${TOK[@]}" --append-eod
	mt-train -q --config "$MT_ROOT/share/configs/tiny.conf" --data-path d_text_document "${TOK[@]}" \
		--split 100,0,0 --data-cache-path cache --micro-batch-size 4 --global-batch-size 4 --train-iters 10 \
		--lr 5e-3 --save ck
	# the expected answers: the command line's greedy output for each prompt
	prompts=("Once upon a time" "The dog" "One day Anna went to the" "x" "She was happy")
	mt-generate -q --load ck --temperature 0 --max-tokens 8 --json "${prompts[@]}" > cli.jsonl
	python3 -c '
import json, sys
for p, l in zip(sys.argv[1:], open("cli.jsonl")):
    print(json.dumps({"prompt": p, "text": p + json.loads(l)["text"]}))' "${prompts[@]}" > expect.jsonl
}

setup() {
	cd "$BATS_TEST_TMPDIR"
	F=$BATS_FILE_TMPDIR
	SERVER=
}

# a failed test leaves no server behind (bats would wait for it)
teardown() {
	[ -z "$SERVER" ] || kill -KILL "$SERVER" 2>/dev/null || true
}

start_server() {
	PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	mt-generate --load "$F/ck" --server "$PORT" "$@" 2> server.log 3>&- &
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
	for _ in $(seq 1 200); do
		kill -0 "$SERVER" 2>/dev/null || break
		sleep 0.05
	done
	! kill -0 "$SERVER" 2>/dev/null
	wait "$SERVER"
}

client() { /usr/bin/python3 "$MT_ROOT/tests/reference/hostile_client.py" --port "$PORT" "$@"; }

@test "server: 50 concurrent requests are answered correctly within seconds while 2,000 idle connections hold half a header" {
	[ "$(sed -n 1p "$F/expect.jsonl" | wc -c)" -gt 10 ]
	# a soft open-file limit of 1024, as many shells have: the server raises its own
	ulimit -Sn 1024
	start_server --server-timeout 60
	grep -q 'polling with epoll' server.log
	run client --idle 2000 --requests 50 --expect "$F/expect.jsonl" --within 20
	echo "$output"
	[ "$status" -ne 77 ] || skip "${output#skip: }"
	[ "$status" -eq 0 ]
	[[ $output == *"50/50 real requests answered correctly"*"with 2000 of 2000 idle connections still open"* ]]
	stop_server
	[ "$(grep -c 'PUT /api 200' server.log)" -eq 50 ]
}

@test "server: the answers are checked: a wrong expectation fails the client" {
	start_server --server-timeout 60
	sed 's/"text": "/"text": "not /' "$F/expect.jsonl" > wrong.jsonl
	run -1 client --idle 10 --requests 5 --expect wrong.jsonl --within 20
	echo "$output"
	[[ $output == *"0/5 real requests answered correctly"* ]]
	stop_server
}

@test "server: a connection silent for --server-timeout seconds is closed, headers finished or not" {
	start_server --server-timeout 2
	grep -q 'closed after 2 s of silence' server.log
	run -0 client --idle 300 --check-closed 4.5
	echo "$output"
	[[ $output == *"300 of 300 idle connections closed by the server"* ]]
	stop_server
}

@test "server: --server-max-connections bounds open connections; a real request waits for a slot the timeout frees" {
	start_server --server-timeout 2 --server-max-connections 8
	grep -q 'connections: 8 open at most' server.log
	/usr/bin/python3 - "$PORT" 3>&- <<-'EOF' &
	import socket, sys, time
	s = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(8)]
	for c in s: c.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\n")
	time.sleep(6)
	EOF
	holder=$!
	sleep 0.5
	# all 8 slots taken: the request waits in the listen queue, then gets its answer
	start=$(date +%s.%N)
	run -0 curl -sS --max-time 15 -X PUT --data-binary '{"prompts": ["The dog"], "tokens_to_generate": 8, "temperature": 0}' \
		-w ' %{http_code}' "http://127.0.0.1:$PORT/api"
	took=$(echo "$(date +%s.%N) - $start" | bc)
	echo "$output (after $took s)"
	[[ $output == *'"text"'*" 200" ]]
	# it waited for the timeout (2 s) to close the idle ones, not for the holder to give up (6 s)
	[ "$(echo "$took > 1.0 && $took < 5.5" | bc)" = 1 ]
	kill "$holder" 2>/dev/null || true
	wait "$holder" || true
	stop_server
}

@test "server: a malformed or oversized Content-Length is a 400 or 413 and the server goes on serving" {
	start_server --server-timeout 10 --max-body-bytes 4096
	for cl in abc 1x -1 ' ' 0x10; do
		run -0 /usr/bin/python3 - "$PORT" "$cl" <<-'EOF'
		import socket, sys
		s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
		s.sendall(("PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n{}" % sys.argv[2]).encode())
		print(s.recv(4096).decode(errors="replace").split("\r\n")[0])
		EOF
		echo "Content-Length: '$cl' -> $output"
		[[ $output == "HTTP/1.1 400 "* ]]
	done
	# a number over --max-body-bytes: the JSON 413 without reading the body
	run -0 curl -sS --max-time 10 -X PUT -H 'Content-Length: 99999999' --data-binary '{}' -w ' %{http_code}' \
		"http://127.0.0.1:$PORT/api"
	[[ $output == '{"error":"the body is larger than the limit of 4096 bytes"} 413' ]]
	run -0 curl -sS --max-time 10 -X PUT --data-binary '{"prompts": ["x"], "tokens_to_generate": 2}' -w ' %{http_code}' \
		"http://127.0.0.1:$PORT/api"
	[[ $output == *" 200" ]]
	stop_server
}

@test "server: bad limits are usage errors" {
	run -2 --separate-stderr mt-generate --load "$F/ck" --server 1 --server-timeout 0
	[[ $stderr == *"--server-timeout"* ]]
	run -2 --separate-stderr mt-generate --load "$F/ck" --server 1 --server-max-connections 2
	[[ $stderr == *"--server-max-connections"* ]]
}

@test "server: two Content-Length headers are a JSON 400" {
	start_server --server-timeout 10
	run -0 /usr/bin/python3 - "$PORT" <<-'EOF2'
	import socket, sys
	s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
	s.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 20\r\n\r\n{}")
	r = s.recv(4096).decode()
	print(r.split("\r\n")[0], r.split("\r\n\r\n", 1)[1])
	EOF2
	echo "$output"
	[ "$output" = 'HTTP/1.1 400 Bad Request {"error":"more than one Content-Length header"}' ]
	stop_server
}
