#!/usr/bin/env bash
# Run one tool on one case of tests/hostile/make-ckpts.py and keep what happened:
#   run-ckpt-case.sh TOOL DIR CASE  ->  DIR/out/TOOL/CASE.rc (exit status) and CASE.err
# TOOL: verify, inspect, export (mt-ckpt-reshard, export as hf-gpt2 without the check),
# generate (two tokens), eval (the valid split of DIR/ds/good), train (mt-train --load, one
# step of the same tiny model on mock data). Each gets the case's iteration directory, so
# nothing falls back (tests/hostile-ckpt.bats tests the fall-back separately). The tools
# are whatever mt-* comes first on PATH; a run is stopped after 60 s (exit 124: a hang).
set -u
tool=$1 dir=$2 c=$3
out=$dir/out/$tool
ck=$dir/cases/$c/iter_0000004
w=$dir/work/$tool-$c
mkdir -p "$out" "$w"
case $tool in
verify) cmd=(mt-ckpt-reshard verify "$ck") ;;
inspect) cmd=(mt-ckpt-reshard inspect "$ck") ;;
export) cmd=(mt-ckpt-reshard export --format hf-gpt2 --no-verify "$ck" "$w/hf") ;;
generate) cmd=(mt-generate --load "$ck" --device cpu --max-tokens 2 "1 2 3") ;;
eval)
	cmd=(mt-eval -q --load "$ck" --device cpu --data-path "$dir/ds/good" --split 0,100,0 --valid-samples 4
		--eval-samples 4 --data-cache-path "$w/cache") ;;
train)
	cmd=(mt-train -q --config "$(dirname "$0")/../../share/configs/tiny.conf" --tokenizer-type NullTokenizer
		--vocab-size 200 --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2
		--global-batch-size 2 --train-iters 5 --eval-iters 0 --mock-data --load "$ck") ;;
*) echo "run-ckpt-case.sh: unknown tool '$tool'" >&2; exit 2 ;;
esac
timeout 60 "${cmd[@]}" >/dev/null 2>"$out/$c.err" </dev/null
echo $? >"$out/$c.rc"
rm -rf "$w"
