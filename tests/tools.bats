#!/usr/bin/env bats
# Every tool: --help and --version, exit codes, and where messages go.
load helpers

@test "every tool answers --help on stdout with a usage line and exit 0" {
	for t in $MT_TOOLS; do
		run -0 --separate-stderr "$t" --help
		[[ ${lines[0]} == "usage: $t "* ]] || { echo "$t: ${lines[0]}"; false; }
		[ -z "$stderr" ] || { echo "$t wrote to stderr: $stderr"; false; }
		run -0 --separate-stderr "$t" -h
		[[ ${lines[0]} == "usage: $t "* ]]
	done
}

@test "every tool answers --version with its name and exit 0" {
	for t in $MT_TOOLS; do
		run -0 --separate-stderr "$t" --version
		[[ ${lines[0]} == "$t (mt) "* ]] || { echo "$t: ${lines[0]}"; false; }
		[[ $output == *"libarchive"* ]]
		[ -z "$stderr" ]
	done
}

@test "an unknown option exits 2 with an error on stderr and nothing on stdout" {
	for t in $MT_TOOLS; do
		run -2 --separate-stderr "$t" --no-such-option
		[ -z "$output" ] || { echo "$t wrote to stdout: $output"; false; }
		[[ $stderr == "$t: error: unknown option '--no-such-option'"* ]] || { echo "$stderr"; false; }
		[[ $stderr == *"usage: $t"* ]]
	done
}

@test "a missing option value exits 2 naming the option" {
	run -2 --separate-stderr input-cat --help-me
	run -2 --separate-stderr mt-train -
	[[ $stderr == *"mt-train: error:"* ]]
}

@test "a tool that has not landed says so and exits 2, never pretending to work" {
	for t in $MT_TOOLS; do
		grep -q 'mt_tool_unavailable' "$MT_ROOT/bin/$t.c" || continue
		run -2 --separate-stderr "$t"
		[ -z "$output" ]
		[[ $stderr == "$t: error: not available yet"* ]]
	done
}

# bats test_tags=gpu
@test "with a GPU, --version lists the visible devices" {
	need_gpu
	run -0 mt-train --version
	[[ $output != *"cuda: not built"* ]] || skip "built without CUDA"
	[[ $output == *"cuda: built for"* ]]
	[[ $output != *" 0 devices visible"* ]]
}

@test "-q may come before a command word: mt-tokenize -q train makes what mt-tokenize train -q makes" {
	cd "$BATS_TEST_TMPDIR"
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 200 > c.jsonl
	mt-tokenize train -q --input c.jsonl --vocab-size 300 --output-prefix A
	run -0 --separate-stderr mt-tokenize -q train --input c.jsonl --vocab-size 300 --output-prefix B
	[ -z "$stderr" ]
	cmp A-vocab.json B-vocab.json
	cmp A-merges.txt B-merges.txt
	# a word that is no command stays where it is: an unknown option or command, as before
	run -2 --separate-stderr mt-tokenize -q frobnicate
	[[ $stderr == "mt-tokenize: error:"* ]]
}
