#!/usr/bin/env bash
# Tokenizer throughput: mt-tokenize against tiktoken (Python, native; or npm's WebAssembly
# build where Python's is missing) and Hugging Face tokenizers, in the same run on the
# same text. Prints MB/s of input text, the ratio to the reference and mt's peak memory.
#
#   bench/tokenize.sh [LINES]      (default 50000 lines, about 57 MB of hard cases)
#   env: THREADS (default nproc), SCALE (8: the scaling input is the corpus SCALE times),
#        PAIRS (1: one run at 1 thread and one at THREADS; N: N such pairs alternated, each
#        pair's ratio and their median, for hosts where one thread's speed varies from run
#        to run)
#
# Needs: build/bin/mt-tokenize (make), tests/reference/fetch.sh (npm) for the vocabularies,
# python3; optional: Python tiktoken / tokenizers, node.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-50000}
THREADS=${THREADS:-$(nproc)}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
C=tests/reference/.cache
[ -s $C/cl100k_base.tiktoken ] || tests/reference/fetch.sh

python3 tests/reference/make-hard-corpus.py --lines "$LINES" > "$W/corpus.jsonl"
echo "# corpus: make-hard-corpus.py --lines $LINES, $(stat -c %s "$W/corpus.jsonl") bytes; $(nproc) CPUs; $(date -u +%F)"

# peak RSS of a command, in MB (kernel's ru_maxrss of the child)
peak() { python3 -c 'import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]); sys.exit(r.returncode) if r.returncode else print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss//1024)' "$@"; }

# mt: MB/s of text from the summary line (tokenization proper: text bytes / wall time)
mt() { # name threads args...
	local name=$1 threads=$2; shift 2
	local log=$W/log rss
	rm -f "$W"/out_* # a new dataset each time: replacing one adds the kernel's freeing of the old file
	rss=$(peak build/bin/mt-tokenize --input "$W/corpus.jsonl" --skip-bad-lines --workers "$threads" \
		--output-prefix "$W/out" "$@" 2> "$log" | tail -n 1)
	local rate ntok
	rate=$(grep -o '([0-9.]* [kMG]B/s)' "$log" | tail -n 1 | tr -d '()')
	ntok=$(grep -o '[0-9]* tokens' "$log" | tail -n 1 | cut -d' ' -f1)
	case $rate in *GB/s) rate=$(awk -v r="${rate% GB/s}" 'BEGIN{print r*1000}') ;; *) rate=${rate% MB/s} ;; esac
	echo "$name $threads $rate $ntok $rss"
}

{
	mt mt-gpt2 1 --tokenizer-type GPT2BPETokenizer --vocab-file $C/gpt2-vocab.json --merge-file $C/gpt2-merges.txt
	mt mt-gpt2 "$THREADS" --tokenizer-type GPT2BPETokenizer --vocab-file $C/gpt2-vocab.json --merge-file $C/gpt2-merges.txt
	mt mt-cl100k 1 --tokenizer-type TikTokenizer --tokenizer-model $C/cl100k_base.tiktoken
	mt mt-cl100k "$THREADS" --tokenizer-type TikTokenizer --tokenizer-model $C/cl100k_base.tiktoken
	if python3 -c 'import tiktoken' 2>/dev/null || python3 -c 'import tokenizers' 2>/dev/null; then
		# Python tiktoken would download its rank files: point its cache at ours
		mkdir -p "$W/tiktoken-cache"
		export TIKTOKEN_CACHE_DIR=$W/tiktoken-cache
		python3 - "$C" "$W/tiktoken-cache" <<'PY'
import hashlib, shutil, sys
c, d = sys.argv[1], sys.argv[2]
urls = {"r50k_base": "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
        "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"}
for name, url in urls.items():
    shutil.copy(f"{c}/{name}.tiktoken", f"{d}/{hashlib.sha1(url.encode()).hexdigest()}")
gpt2 = {"vocab.bpe": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
        "encoder.json": "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json"}
for f, url in (("gpt2-merges.txt", gpt2["vocab.bpe"]), ("gpt2-vocab.json", gpt2["encoder.json"])):
    shutil.copy(f"{c}/{f}", f"{d}/{hashlib.sha1(url.encode()).hexdigest()}")
PY
		python3 bench/tokenize_ref.py "$W/corpus.jsonl" $C/gpt2-vocab.json $C/gpt2-merges.txt "$THREADS"
	fi
	if command -v node >/dev/null && [ -d $C/node_modules/tiktoken ]; then
		node bench/tokenize_ref.mjs "$W/corpus.jsonl" $C/node_modules
	fi
} > "$W/results"

# Scaling on a larger input (the corpus repeated SCALE times) so that start-up and the
# final fsync do not dominate; mt only.
SCALE=${SCALE:-8}
for _ in $(seq "$SCALE"); do cat "$W/corpus.jsonl"; done > "$W/big.jsonl"
for enc in gpt2 cl100k; do
	if [ $enc = gpt2 ]; then a=(--tokenizer-type GPT2BPETokenizer --vocab-file $C/gpt2-vocab.json --merge-file $C/gpt2-merges.txt)
	else a=(--tokenizer-type TikTokenizer --tokenizer-model $C/cl100k_base.tiktoken); fi
	for t in $(printf "%s\n" 1 $(( THREADS / 2 )) "$THREADS" | awk '$1 >= 1 && !seen[$1]++'); do # 1, half, all (no repeats)
		rm -f "$W"/big_*
		build/bin/mt-tokenize -vv --input "$W/big.jsonl" --skip-bad-lines --workers "$t" --output-prefix "$W/big" "${a[@]}" 2> "$W/log"
		r=$(grep -o '([0-9.]* [kMG]B/s)' "$W/log" | tail -n 1 | tr -d '()')
		# the serial tail after the last batch (-vv): fsync, the .idx, renames
		c=$(grep -o 'commit (fsync, index) [0-9.]* s' "$W/log" | grep -o '[0-9.]* s$' | cut -d' ' -f1)
		echo "scale-$enc $t $r ${c:-?}"
	done
done > "$W/scaling"
PAIRS=${PAIRS:-1}
if [ "$PAIRS" -gt 1 ]; then
	for enc in gpt2 cl100k; do
		if [ $enc = gpt2 ]; then a=(--tokenizer-type GPT2BPETokenizer --vocab-file $C/gpt2-vocab.json --merge-file $C/gpt2-merges.txt)
		else a=(--tokenizer-type TikTokenizer --tokenizer-model $C/cl100k_base.tiktoken); fi
		for i in $(seq "$PAIRS"); do
			for t in 1 "$THREADS"; do
				rm -f "$W"/big_*
				build/bin/mt-tokenize --input "$W/big.jsonl" --skip-bad-lines --workers "$t" --output-prefix "$W/big" "${a[@]}" 2> "$W/log"
				echo "$enc $i $t $(grep -o '([0-9.]* [kMG]B/s)' "$W/log" | tail -n 1 | tr -d '()')"
			done
		done
	done > "$W/pairs"
fi

# The machine's own ceiling for this work: THREADS independent one-worker processes, each
# on its 1/THREADS of the same input, started together (no state shared but the hardware:
# cores, caches, memory bandwidth, clocks). mt's threads cannot scale past what this shows.
split -n l/"$THREADS" -d -a 3 "$W/big.jsonl" "$W/part."
for enc in gpt2 cl100k; do
	if [ $enc = gpt2 ]; then a=(--tokenizer-type GPT2BPETokenizer --vocab-file $C/gpt2-vocab.json --merge-file $C/gpt2-merges.txt)
	else a=(--tokenizer-type TikTokenizer --tokenizer-model $C/cl100k_base.tiktoken); fi
	# each process reports its own MB/s as the scaling lines do (text bytes over its
	# tokenizing time, start-up excluded); the sum is the aggregate while they all run
	for f in "$W"/part.*; do
		[ "${f%.log}" = "$f" ] || continue
		build/bin/mt-tokenize --input "$f" --skip-bad-lines --workers 1 --output-prefix "$f.out" "${a[@]}" 2> "$f.log" &
	done
	wait
	# also all bytes over the slowest process's time: what the processes give together
	# when one cannot take work from another
	cat "$W"/part.*.log | grep -o '[0-9.]* [kMG]B of text in [0-9.]* s ([0-9.]* [kMG]B/s)' | tr -d '()' |
		awk -v enc="$enc" -v n="$THREADS" '
			function mb(x, u) { return u ~ /^G/ ? x * 1000 : u ~ /^k/ ? x / 1000 : x }
			{ s += mb($8, $9); b += mb($1, $2); if ($6 > slow) slow = $6 }
			END { printf "ceiling-%s %d processes %.1f MB/s (all bytes / slowest process: %.1f MB/s)\n", enc, n, s, (slow > 0) ? b / slow : 0 }'
	rm -f "$W"/part.*.log
	rm -f "$W"/part.*.out*
done > "$W/ceiling"
rm -f "$W"/big* "$W"/part.*

awk -v threads="$THREADS" '
	{ rate[$1 " " $2] = $3; tok[$1 " " $2] = $4; if ($5 != "") rss[$1 " " $2] = $5; order[n++] = $1 " " $2 }
	END {
		printf "%-24s %7s %10s %12s %8s\n", "engine", "threads", "MB/s", "tokens", "peak MB"
		for (i = 0; i < n; i++) { k = order[i]; split(k, a, " ")
			printf "%-24s %7s %10.2f %12s %8s\n", a[1], a[2], rate[k], tok[k], (k in rss) ? rss[k] : "-" }
		print ""
		split("gpt2 cl100k", encs, " ")
		for (e = 1; e <= 2; e++) {
			enc = encs[e]
			for (t = 1; t <= 2; t++) {
				th = (t == 1) ? 1 : threads
				m = rate["mt-" enc " " th]
				split("tiktoken-" enc " hf-tokenizers-" enc " tiktoken-wasm-" enc, refs, " ")
				for (r = 1; r <= 3; r++) { k = refs[r] " " th
					if (k in rate && rate[k] > 0)
						printf "ratio %s %s threads: mt / %s = %.2fx\n", enc, th, refs[r], m / rate[k] }
			}
			if (rate["mt-" enc " 1"] > 0)
				printf "scaling %s: %s threads / 1 thread = %.2fx\n", enc, threads, rate["mt-" enc " " threads] / rate["mt-" enc " 1"]
		}
	}' "$W/results"
echo
echo "# scaling on $SCALE x the corpus ($(( SCALE * $(stat -c %s "$W/corpus.jsonl") / 1000000 )) MB), mt only"
awk '{ v = $3; if ($4 == "GB/s") v *= 1000; r[$1 " " $2] = v; print $1, $2, "threads", v, "MB/s, commit", $5, "s"
	if ($2 == 1) one[$1] = v; else if (one[$1] > 0) printf "  %s: %.2fx of one thread\n", $1, v / one[$1] }' "$W/scaling"
echo
echo "# the machine's ceiling: $THREADS independent one-worker processes on 1/$THREADS of the input each"
awk -v threads="$THREADS" 'NR == FNR { v = ($4 == "GB/s") ? $3 * 1000 : $3; r[$1 " " $2] = v; next }
	{ k = "scale-" substr($1, 9); print
	  if (r[k " 1"] > 0) printf "  %.2fx of one thread; mt with %d workers reaches %.0f%% of this ceiling\n",
		$4 / r[k " 1"], threads, 100 * r[k " " threads] / $4 }' "$W/scaling" "$W/ceiling"
if [ -s "$W/pairs" ]; then
	echo
	echo "# $PAIRS pairs of one and $THREADS workers, alternated, on the same input"
	awk -v threads="$THREADS" '
		function mb(x, u) { return u ~ /^G/ ? x * 1000 : u ~ /^k/ ? x / 1000 : x }
		{ v = mb($4, $5); if ($3 == 1) one[$1 " " $2] = v; else { k = $1 " " $2; r = v / one[k]
		  printf "pair-%s %s: %.1f / %.1f MB/s = %.2fx\n", $1, $2, v, one[k], r; ratios[$1] = ratios[$1] " " r } }
		END { for (e in ratios) { n = split(substr(ratios[e], 2), x, " ")
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
			m = (n % 2) ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
			printf "median scaling %s: %d threads / 1 thread = %.2fx\n", e, threads, m } }' "$W/pairs"
fi
