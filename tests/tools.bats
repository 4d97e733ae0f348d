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

# the names of lib/base/knobs.c's table, one a line
knob_names() {
	grep -oE '^[[:space:]]*\[MT_KNOB_[A-Z0-9_]+\] = \{ "MT_[A-Z0-9_]+"' "$MT_ROOT/lib/base/knobs.c" | grep -oE '"MT_[A-Z0-9_]+"' | tr -d '"'
}

@test "--version -v lists every MT_* environment variable of the table, its default or value and its meaning" {
	names=$(knob_names)
	[ "$(echo "$names" | wc -l)" -ge 20 ]
	run -0 --separate-stderr mt-train --version -v
	[ -z "$stderr" ]
	[[ $output == *"environment (docs/environment.md):"* ]]
	for n in $names; do
		[[ $output == *"  $n (default: "* ]] || { echo "$n missing from mt-train --version -v"; false; }
	done
	[[ $output == *"test hook: "* ]]
	# a set variable shows its value; -v before --version works too; plain --version has no table
	MT_CUDA_WORKSPACE_MB=64 run -0 mt-index -v --version
	[[ $output == *"  MT_CUDA_WORKSPACE_MB=64"* ]]
	run -0 mt-train --version
	[[ $output != *"MT_CUDA_WORKSPACE_MB"* ]]
}

@test "docs/environment.md documents every MT_* environment variable of the table" {
	for n in $(knob_names); do
		grep -q "^| \`$n\` |" "$MT_ROOT/docs/environment.md" || { echo "$n missing from docs/environment.md"; false; }
	done
}

@test "no MT_* environment variable is read outside lib/base/knobs.c (readers go through base/knobs.h)" {
	cd "$MT_ROOT"
	run grep -rnE --include='*.c' --include='*.cc' --include='*.cu' --include='*.cuh' --include='*.h' \
		'(getenv|env_is)\("MT_' lib bin kernels
	hits=$(printf '%s\n' "$output" | grep -v '^lib/base/knobs\.c:' | grep -v '^kernels/bench/' | grep . || true)
	[ -z "$hits" ] || { echo "read these through base/knobs.h (mt_knob_*):"; echo "$hits"; false; }
}
