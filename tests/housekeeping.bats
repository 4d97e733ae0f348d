#!/usr/bin/env bats
# Housekeeping: the temporaries of killed writers (mt-tokenize's .bin.tmp.<pid> and
# spill files, index caches' *.tmp.<pid>) are removed by the next run that writes
# there, a live writer's are kept; mt-tokenize's memory is bounded by the document cap
# times the workers whatever the line length, and a longer line is an error naming the
# file and line (or skipped with --skip-bad-lines).
load helpers
cpu_only

NULL100=(--tokenizer-type NullTokenizer --vocab-size 100)

setup() {
	cd "$BATS_TEST_TMPDIR"
	/usr/bin/python3 -c '
import json, random
r = random.Random(1)
for i in range(3000):
    print(json.dumps({"text": " ".join(str(r.randrange(100)) for _ in range(r.randint(1, 60)))}))' > small.jsonl
}

# a pid that runs nowhere on this machine: above the kernel's pid_max
dead_pid() { echo $(($(cat /proc/sys/kernel/pid_max) + 17)); }

@test "a killed mt-tokenize's .bin.tmp and spill files are removed by the next run; a live writer's are kept" {
	# kill at the third step of the atomic layer: .bin, .idx.lens and .idx.docs temporaries exist
	run env MT_ATOMIC_KILL_AT=3 mt-tokenize -q --input small.jsonl --output-prefix out "${NULL100[@]}"
	[ "$status" -eq 137 ]
	left=$(compgen -G 'out_text_document.*.tmp.*' | sort)
	echo "$left"
	[ "$(echo "$left" | wc -l)" -eq 3 ]
	[[ $left == *".bin.tmp."*".idx.docs.tmp."*".idx.lens.tmp."* ]]
	# one of a process that still runs (another user's would be kept too: EPERM)
	sleep 60 &
	live=$!
	touch "out_text_document.bin.tmp.$live"
	# and a stale one whose pid cannot exist; a directory of that form is not ours to remove
	dead=$(dead_pid)
	touch "out_text_document.idx.tmp.$dead"
	mkdir "out_text_document.bin.tmp.$((dead + 1))"
	run -0 mt-tokenize -q --input small.jsonl --output-prefix out "${NULL100[@]}"
	now=$(compgen -G 'out_text_document.*.tmp.*' | sort | tr '\n' ' ')
	kill "$live"
	echo "after: $now"
	[ "$now" = "$(printf '%s\n' "out_text_document.bin.tmp.$((dead + 1))" "out_text_document.bin.tmp.$live" | sort | tr '\n' ' ')" ]
	run -0 mt-index verify out_text_document
}

@test "index caches: a dead writer's *.tmp.<pid> is removed by the next run, also when the cache itself is unchanged" {
	mt-tokenize -q --input small.jsonl --output-prefix d "${NULL100[@]}" --append-eod
	build=(mt-index build --data-path d_text_document --seq-length 16 --split 90,10,0 --train-samples 500
		--valid-samples 50 --data-cache-path cache)
	"${build[@]}" > /dev/null
	before=$(stat -c '%n %i %Y' cache/* | sort)
	dead=$(dead_pid)
	n=0
	for f in cache/*; do
		touch "$f.tmp.$dead"
		n=$((n + 1))
	done
	[ "$n" -ge 4 ]
	[ "$(compgen -G 'cache/*.tmp.*' | wc -l)" -eq "$n" ]
	sleep 1.1
	"${build[@]}" > /dev/null
	[ -z "$(compgen -G 'cache/*.tmp.*')" ]
	# the caches themselves were not rewritten
	[ "$(stat -c '%n %i %Y' cache/* | sort)" = "$before" ]
}

# mt-tokenize under /usr/bin/time -v (its stderr and the figures in time.log): sets RC
# and RSS (peak, kB)
peak_rss() {
	RC=0
	/usr/bin/time -v mt-tokenize "$@" 2> time.log || RC=$?
	RSS=$(sed -n 's/^.*Maximum resident set size (kbytes): //p' time.log)
	echo "exit $RC, peak RSS ${RSS} kB: mt-tokenize $*"
}

@test "a 100 MB line is an error naming the file and line, read through in bounded memory" {
	/usr/bin/python3 -c '
import json
print(json.dumps({"text": "1 2"}))
print(json.dumps({"text": "7 " * 50_000_000}))
print(json.dumps({"text": "3 4"}))' > long.jsonl
	[ "$(stat -c %s long.jsonl)" -gt 100000000 ]
	peak_rss -q --input long.jsonl --output-prefix x "${NULL100[@]}" --workers 2
	[ "$RC" -eq 3 ]
	grep -q "error: 'long.jsonl':2: a document of at least [0-9]* bytes, over the limit of 33554432" time.log
	grep -q -- "--max-document-bytes" time.log
	[ ! -e x_text_document.idx ] && [ ! -e x_text_document.bin ]
	# the reader holds at most the cap of the line (32 MiB), not 100 MB
	[ "$RSS" -lt 80000 ]
	# skipped and counted with --skip-bad-lines; the others are tokenized
	peak_rss --input long.jsonl --output-prefix x "${NULL100[@]}" --workers 2 --skip-bad-lines
	[ "$RC" -eq 0 ]
	grep -q "skipping 'long.jsonl':2: a document of [0-9]* bytes or more" time.log
	grep -q "2 documents" time.log
	grep -q "1 skipped" time.log
	[ "$RSS" -lt 80000 ]
	run -0 --separate-stderr mt-index cat x_text_document
	[ "$output" = $'1 2\n3 4' ]
}

@test "memory is bounded by the cap times the workers: lines just under a 4 MiB cap" {
	/usr/bin/python3 -c '
import json
for i in range(24):
    print(json.dumps({"text": "%d " % (i % 100) * 1_990_000}))' > big.jsonl
	cap=$((4 << 20))
	for w in 1 2; do
		peak_rss -q --input big.jsonl --output-prefix y$w "${NULL100[@]}" --workers $w --max-document-bytes $cap
		[ "$RC" -eq 0 ]
		# the stated bound: 8 bytes per byte of the cap per worker, plus the pool and the program
		[ "$RSS" -lt $(( (8 * cap * w + (2 * w + 2) * cap) / 1024 + 40000 )) ]
	done
	[ "$(mt-index stat y1_text_document | grep -c .)" -gt 0 ]
	cmp y1_text_document.bin y2_text_document.bin
}

@test "--max-document-bytes: paragraphs and whole files over it, and a bad value" {
	printf 'a b\n\n%s\n%s\n\nc d\n' "$(head -c 3000 /dev/zero | tr '\0' 'x')" "$(head -c 3000 /dev/zero | tr '\0' 'y')" > para.txt
	run -3 --separate-stderr mt-tokenize -q --input para.txt --input-format text --text-split paragraph \
		--output-prefix p "${NULL100[@]}" --max-document-bytes 4096
	[[ $stderr == *"'para.txt':3: a document of 6001 bytes, over the limit of 4096"* ]]
	run -2 --separate-stderr mt-tokenize -q --input para.txt --output-prefix p "${NULL100[@]}" --max-document-bytes 10
	[[ $stderr == *"--max-document-bytes"* ]]
}
