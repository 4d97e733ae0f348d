#!/usr/bin/env bash
# Run one tool on one case of tests/hostile/make-datasets.py and keep what happened:
#   run-case.sh TOOL DIR CASE   ->  DIR/out/TOOL/CASE.rc (exit status) and CASE.err (stderr)
# TOOL: stat (mt-index stat), train (mt-train, one step of a tiny model on the data, no
# --mock-data), eval (mt-eval of DIR/ck on the data as its valid split), blend (mt-blend
# build). The tools are whatever mt-* comes first on PATH; a run is stopped after 60 s
# (exit 124: a hang, counted as a failure by check.py).
set -u
tool=$1 dir=$2 c=$3
out=$dir/out/$tool
p=$dir/$c
mkdir -p "$out"
case $tool in
stat) cmd=(mt-index stat "$p") ;;
train)
	cmd=(mt-train -q --config "$(dirname "$0")/../../share/configs/tiny.conf" --tokenizer-type NullTokenizer
		--vocab-size 200 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
		--global-batch-size 2 --train-iters 1 --eval-iters 0 --split 100,0,0 --data-path "$p"
		--data-cache-path "$dir/cache/train-$c") ;;
eval)
	cmd=(mt-eval -q --load "$dir/ck" --data-path "$p" --split 0,100,0 --valid-samples 4 --eval-samples 4
		--data-cache-path "$dir/cache/eval-$c") ;;
blend)
	cmd=(mt-blend build --data-path "$p" --seq-length 16 --train-samples 20 --split 100,0,0
		--data-cache-path "$dir/cache/blend-$c") ;;
*) echo "run-case.sh: unknown tool '$tool'" >&2; exit 2 ;;
esac
timeout 60 "${cmd[@]}" >/dev/null 2>"$out/$c.err" </dev/null
echo $? >"$out/$c.rc"
