#!/usr/bin/env bats
# mt-index: stat numbers against an independent reader (tests/reference/megatron_idx.py),
# verify against every kind of corruption, merge byte-for-byte against tokenizing the
# inputs together (and beyond 2^32 bytes on sparse files), cat against idx-dump and
# mt-tokenize decode, the error paths, and the libFuzzer run of the reader.
load helpers

REF=$MT_ROOT/tests/reference
CACHE=$REF/.cache
GPT2=(--tokenizer-type GPT2BPETokenizer --vocab-file "$CACHE/gpt2-vocab.json" --merge-file "$CACHE/gpt2-merges.txt")

# Once per file: a corpus in two parts, tokenized separately and together (GPT-2,
# uint16, end-of-document tokens), and a small int32 dataset with empty documents
# and documents of several sequences.
setup_file() {
	"$REF/fetch.sh"
	cd "$BATS_FILE_TMPDIR"
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 3000 > demo.jsonl
	head -n 1200 demo.jsonl > part1.jsonl
	tail -n +1201 demo.jsonl > part2.jsonl
	for p in part1 part2 demo; do
		mt-tokenize -q --input $p.jsonl "${GPT2[@]}" --append-eod --workers 2 --output-prefix $p
	done
	# int32 (vocab >= 65500), pre-split documents: lists of strings are several sequences
	python3 - > multi.jsonl <<-'EOF'
	import json
	docs = [["1 2 3", "4 5"], [], "70000", ["", "6"], "7 8 9 10 11 12", [], ["13", "14", "15"]]
	for d in docs:
	    print(json.dumps({"text": d}))
	EOF
	mt-tokenize -q --input multi.jsonl --tokenizer-type NullTokenizer --vocab-size 100000 --output-prefix multi
}

setup() {
	F=$BATS_FILE_TMPDIR
	A=$F/part1_text_document
	B=$F/part2_text_document
	AB=$F/demo_text_document
	M=$F/multi_text_document
	mkdir "$BATS_TEST_TMPDIR/work"
	cd "$BATS_TEST_TMPDIR/work"
}

# copy PREFIX NAME: the dataset's two files as ./NAME.bin and ./NAME.idx
copy() {
	cp "$1.bin" "$2.bin"
	cp "$1.idx" "$2.idx"
}

# poke FILE OFFSET FORMAT VALUE: overwrite bytes with a little-endian struct value
poke() {
	python3 -c 'import struct, sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); f.write(struct.pack("<" + sys.argv[3], int(sys.argv[4])))' "$@"
}

# The statistics mt-index stat --json gives, computed with the reference reader:
# documents, tokens, document lengths (sum of their sequences) and nearest-rank
# percentiles (the length of rank ceil(p * n / 100), rank 1 at least).
ref_stat() {
	python3 - "$1" <<-'EOF'
	import json, math, os, sys
	sys.path.insert(0, os.environ["REF"])
	import megatron_idx
	prefix = sys.argv[1]
	ds = megatron_idx.read(prefix)
	lens, doc_idx = ds["lengths"], ds["doc_idx"]
	docs = sorted(sum(lens[doc_idx[d]:doc_idx[d + 1]]) for d in range(len(doc_idx) - 1))
	n = len(docs)
	pct = lambda p: docs[max(1, math.ceil(p * n / 100)) - 1] if n else None
	print(json.dumps({
	    "prefix": prefix, "dtype": ds["name"], "dtype_code": ds["code"], "documents": n,
	    "empty_documents": docs.count(0), "sequences": len(lens), "tokens": sum(lens),
	    "bin_bytes": os.path.getsize(prefix + ".bin"), "idx_bytes": os.path.getsize(prefix + ".idx"),
	    "doc_length": {"min": docs[0] if n else None, "p50": pct(50), "p90": pct(90), "p99": pct(99),
	                   "max": docs[-1] if n else None, "mean": sum(docs) / n if n else None}}))
	EOF
}
export REF

# same_json A B: two JSON objects equal (floats to 1e-12 relative)
same_json() {
	python3 - "$1" "$2" <<-'EOF'
	import json, math, sys
	a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
	def eq(x, y):
	    if isinstance(x, dict):
	        return isinstance(y, dict) and x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
	    if isinstance(x, float) or isinstance(y, float):
	        return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-12)
	    return x == y and type(x) == type(y)
	if not eq(a, b):
	    sys.exit(f"differ:\n  {a}\n  {b}")
	EOF
}

@test "help lists the commands; a command is required; build needs its options" {
	run -0 --separate-stderr mt-index --help
	[[ $output == *"mt-index stat"* && $output == *"mt-index verify"* && $output == *"mt-index merge"* ]]
	[[ $output == *"mt-index cat"* && $output == *"mt-index build"* ]]
	run -0 mt-index merge --help
	[[ $output == *"--output-prefix OUT"* && $output == *"--input DIR"* ]]
	run -0 mt-index cat --help
	[[ $output == *"--tokenizer-type"* && $output == *"--docs A:B"* ]]
	run -2 --separate-stderr mt-index
	[[ $stderr == "mt-index: error: a command is required"* ]]
	run -2 --separate-stderr mt-index frobnicate x
	[[ $stderr == "mt-index: error: unknown command 'frobnicate'"* ]]
	run -2 --separate-stderr mt-index build --data-path x
	[ -z "$output" ]
	[[ $stderr == "mt-index: error: --seq-length is required"* ]]
	run -2 --separate-stderr mt-index stat --no-such-option "$A"
	[[ $stderr == "mt-index: error: unknown option '--no-such-option'"* ]]
}

@test "-q and -v may come before the command word, as in mt-index -q stat, with the same result" {
	run -0 --separate-stderr mt-index stat --json "$M"
	want=$output
	for pre in -q --quiet -v -qv; do
		run -0 --separate-stderr mt-index $pre stat --json "$M"
		[ "$output" = "$want" ] || { echo "$pre: $output"; false; }
	done
	run -0 mt-index -q verify "$M"
	# an option that is not one of those still has to follow the command word
	run -2 --separate-stderr mt-index --json stat "$M"
	[[ $stderr == "mt-index: error:"* ]]
}

@test "stat --json: every number equals the reference reader's" {
	for p in "$A" "$B" "$AB" "$M"; do
		run -0 --separate-stderr mt-index stat --json "$p"
		[ -z "$stderr" ]
		[ "${#lines[@]}" -eq 1 ]
		same_json "$output" "$(ref_stat "$p")"
	done
	# the int32 dataset: 7 documents of 5 0 1 1 6 0 3 tokens, 8 sequences
	run -0 mt-index stat --json "$M"
	same_json "$output" '{"prefix": "'"$M"'", "dtype": "int32", "dtype_code": 4, "documents": 7,
		"empty_documents": 2, "sequences": 8, "tokens": 16, "bin_bytes": 64, "idx_bytes": 194,
		"doc_length": {"min": 0, "p50": 1, "p90": 6, "p99": 6, "max": 6, "mean": 2.2857142857142856}}'
}

@test "stat: the human table, a suffix on the prefix, and a total over several datasets" {
	run -0 --separate-stderr mt-index stat "$M"
	[ "${lines[0]}" = "$M" ]
	[ "${lines[1]}" = "  dtype        int32" ]
	[ "${lines[2]}" = "  documents    7 (2 empty)" ]
	[ "${lines[3]}" = "  sequences    8" ]
	[ "${lines[4]}" = "  tokens       16" ]
	[ "${lines[5]}" = "  .bin         64 bytes (64 B)" ]
	[ "${lines[6]}" = "  .idx         194 bytes (194 B)" ]
	[ "${lines[7]}" = "  doc length   min 0  p50 1  p90 6  p99 6  max 6  mean 2.29 tokens" ]
	[ -z "$stderr" ]
	[ "$(mt-index stat "$M.bin")" = "$output" ]
	[ "$(mt-index stat "$M.idx")" = "$output" ]

	run -0 mt-index stat "$A" "$B"
	[[ $output == *"total: 2 datasets"* ]]
	run -0 mt-index stat --json "$A" "$B"
	[ "${#lines[@]}" -eq 2 ]
	# the total's numbers are those of the datasets merged (= tokenized together)
	total=$(mt-index stat "$A" "$B" | sed -n '/^total/,$p' | sed 1d | grep -v '^  \.')
	whole=$(mt-index stat "$AB" | sed 1d | grep -v '^  \.')
	[ "$total" = "$whole" ]
}

@test "stat: an empty dataset has no percentiles" {
	printf '' > empty.jsonl
	mt-tokenize -q --input empty.jsonl "${GPT2[@]}" --output-prefix e
	run -0 mt-index stat --json e_text_document
	same_json "$output" "$(ref_stat e_text_document)"
	[[ $output == *'"p50":null'* ]]
	run -0 mt-index stat e_text_document
	[[ $output == *"documents    0 (0 empty)"* && $output == *"- (no documents)"* ]]
}

@test "stat, cat and merge: missing file exit 4, bad magic or truncated index exit 3, naming the file" {
	run -4 --separate-stderr mt-index stat nope
	[ "$stderr" = "mt-index: error: cannot open 'nope.idx': No such file or directory" ]
	copy "$M" m
	rm m.bin
	run -4 --separate-stderr mt-index cat m
	[[ $stderr == *"cannot open 'm.bin'"* ]]
	copy "$M" m
	printf 'XX' | dd of=m.idx conv=notrunc status=none
	for cmd in stat cat; do
		run -3 --separate-stderr mt-index $cmd m
		[ "$stderr" = "mt-index: error: 'm.idx': bad magic (not a Megatron MMIDIDX index)" ]
	done
	run -3 --separate-stderr mt-index merge -o out "$A" m
	[[ $stderr == *"'m.idx': bad magic"* ]]
	copy "$M" m
	truncate -s 100 m.idx
	run -3 --separate-stderr mt-index stat m
	[[ $stderr == "mt-index: error: 'm.idx': truncated: 100 bytes, header needs 194" ]]
	truncate -s 20 m.idx
	run -3 --separate-stderr mt-index cat m
	[[ $stderr == "mt-index: error: 'm.idx': truncated: 20 bytes, header needs 34" ]]
	# an index that opens but is inconsistent inside: refused before use
	copy "$M" m
	poke m.idx $((130 + 16)) q 9 # document index entry 2
	run -3 --separate-stderr mt-index stat m
	[[ $stderr == *"'m.idx': document index"* ]]
	[ -z "$output" ]
	[ ! -e out.bin ]
	[ ! -e out.idx ]
	[ -z "$(ls | grep tmp)" ]
}

@test "verify: sound datasets answer 'ok PREFIX: N documents, M tokens'; -q prints nothing" {
	run -0 --separate-stderr mt-index verify "$A" "$M.idx" --vocab-size 100000
	[ "${lines[0]}" = "ok $A: 1200 documents, $(mt-index stat --json "$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])') tokens" ]
	[ "${lines[1]}" = "ok $M: 7 documents, 16 tokens" ]
	[ -z "$stderr" ]
	run -0 --separate-stderr mt-index verify -q "$A" "$B"
	[ -z "$output" ]
	[ -z "$stderr" ]
	run -0 mt-index verify "$AB" --vocab-size 50257
	run -2 --separate-stderr mt-index verify "$A" --vocab-size 0
	run -2 --separate-stderr mt-index verify
}

@test "verify: each kind of corruption is one line 'PREFIX: problem' and exit 1" {
	# the int32 dataset: S = 8 sequences, D = 8; lengths at 34, pointers at 66, document index at 130
	check() {
		run -1 --separate-stderr mt-index verify m "$@"
		[ -z "$stderr" ] || { echo "stderr: $stderr"; return 1; }
		printf '%s\n' "$output"
	}
	copy "$M" m; printf 'X' | dd of=m.idx conv=notrunc status=none
	[ "$(check)" = "m: bad magic in the .idx (not a Megatron MMIDIDX index)" ]
	copy "$M" m; poke m.idx 9 Q 2; poke m.idx 17 B 9
	[ "$(check)" = "m: unsupported version 2 in the .idx (expected 1)
m: unknown dtype code 9 in the .idx" ]
	copy "$M" m; truncate -s 150 m.idx
	[ "$(check)" = "m: truncated .idx: 150 bytes, but its 8 sequences and 8 document index entries need 194" ]
	copy "$M" m; truncate -s 30 m.idx
	[ "$(check)" = "m: truncated .idx: 30 bytes, the header needs 34" ]
	copy "$M" m; truncate -s 60 m.bin
	[ "$(check)" = "m: .bin is 60 bytes, but the index's lengths add up to 16 tokens of 4 bytes" ]
	copy "$M" m; poke m.idx $((34 + 4 * 3)) i -7
	[ "$(check)" = "m: sequence 3 has negative length -7" ]
	copy "$M" m; poke m.idx $((66 + 8 * 4)) q 1000
	[ "$(check)" = "m: 2 sequence pointers do not follow from the one before; the first: sequence 4 starts at byte 1000, expected 28" ]
	copy "$M" m; poke m.idx $((34 + 4 * 0)) i 4
	[ "$(check)" = "m: sequence 1 starts at byte 12, expected 16 (pointers are contiguous from 0)
m: .bin is 64 bytes, but the index's lengths add up to 17 tokens of 4 bytes" ]
	copy "$M" m; poke m.idx $((130 + 8 * 3)) q 1
	[ "$(check)" = "m: document index 3 is 1, below the entry before it (2)" ]
	copy "$M" m; poke m.idx 130 q 1
	[ "$(check)" = "m: document index 0 is 1, expected 0" ]
	copy "$M" m; poke m.idx $((130 + 8 * 7)) q 12
	[ "$(check)" = "m: the document index ends at 12, expected 8 (the sequence count)" ]
	copy "$M" m; poke m.idx 26 Q 0
	[ "$(check)" = "m: .idx has 64 bytes after the document index (neither none nor a multimodal modes array of 8 bytes)
m: the .idx has no document index (its header says 0 entries, at least 1 is needed)" ]
	copy "$M" m; printf 'zz' >> m.idx
	[ "$(check)" = "m: .idx has 2 bytes after the document index (neither none nor a multimodal modes array of 8 bytes)" ]
	# a multimodal modes array (S bytes) is not a problem
	copy "$M" m; head -c 8 /dev/zero >> m.idx
	run -0 mt-index verify m
	# several problems at once, each on its line
	copy "$M" m; poke m.idx 9 Q 3; poke m.idx $((34 + 4 * 3)) i -7; poke m.idx $((130 + 8 * 3)) q 1
	run -1 mt-index verify m
	[ "${#lines[@]}" -eq 3 ]
	# and none of them crashes the other commands: exit 3
	for cmd in stat cat; do
		run -3 mt-index $cmd m
	done
}

@test "verify --vocab-size: tokens outside the vocabulary counted, with the first position" {
	# GPT-2 with end-of-document tokens: every document ends with 50256
	run -1 --separate-stderr mt-index verify "$A" --vocab-size 50256
	[ "$output" = "$A: 1200 tokens are outside the vocabulary [0, 50256) (values 50256 to 50256); the first: document 0, sequence 0, position $(($(mt-index cat "$A" --docs 0 | wc -w) - 1)) is 50256" ]
	# int32: 70000 (document 2) and a negative token written into document 4
	copy "$M" m
	poke m.bin $((4 * 7)) i -3
	run -1 mt-index verify m --vocab-size 65536
	[ "$output" = "m: 2 tokens are outside the vocabulary [0, 65536) (values -3 to 70000); the first: document 2, sequence 2, position 0 is 70000" ]
	run -1 mt-index verify m --vocab-size 100000
	[ "$output" = "m: 1 token is outside the vocabulary [0, 100000): document 4, sequence 4, position 0 is -3" ]
	# a token problem does not hide the others
	truncate -s 60 m.bin
	run -1 mt-index verify m --vocab-size 100000
	[ "${#lines[@]}" -eq 2 ]
	[[ ${lines[1]} == *"token 7 of the .bin is -3" ]]
}

@test "verify: a missing file is exit 4 naming it, after checking the others" {
	copy "$M" m
	copy "$M" bad
	poke bad.idx 9 Q 5
	run -4 --separate-stderr mt-index verify nope m bad
	[ "$stderr" = "mt-index: error: cannot open 'nope.idx': No such file or directory" ]
	[ "${lines[0]}" = "ok m: 7 documents, 16 tokens" ]
	[ "${lines[1]}" = "bad: unsupported version 5 in the .idx (expected 1)" ]
	copy "$M" m
	run -1 mt-index verify m bad
}

@test "merge: the two parts merged are byte-identical to the corpus tokenized whole" {
	run -0 --separate-stderr mt-index merge --output-prefix merged "$A" "$B"
	cmp merged.bin "$AB.bin"
	cmp merged.idx "$AB.idx"
	[[ $stderr == "mt-index: merged 2 datasets: 3000 documents, 3000 sequences, "*" tokens (uint16) into merged.{bin,idx} in "* ]]
	[ -z "$output" ]
	[ "$(ls)" = "$(printf 'merged.bin\nmerged.idx')" ]
	# -q silences the summary; the suffixes are accepted
	run -0 --separate-stderr mt-index merge -q -o merged "$A.bin" "$B.idx"
	[ -z "$stderr" ]
	cmp merged.idx "$AB.idx"
	# the independent reader agrees and sees the concatenation
	python3 "$REF/megatron_idx.py" merged > got.ids
	{ idx-dump "$A"; idx-dump "$B"; } > want.ids
	cmp got.ids want.ids
}

@test "merge: empty documents, several sequences, order kept as given, Megatron's add_index" {
	mt-index merge -q -o m3 "$M" "$M" "$M"
	[ "$(idx-dump m3)" = "$(idx-dump "$M"; idx-dump "$M"; idx-dump "$M")" ]
	python3 "$REF/megatron_idx.py" --index m3 > idx.txt
	# the document index of the copies is shifted by 8 sequences each
	grep -qx 'doc_idx 0 2 2 3 4 5 5 8 10 10 11 12 13 13 16 18 18 19 20 21 21 24' idx.txt
	mt-index merge -q -o ba "$B" "$A"
	[ "$(idx-dump ba)" = "$(idx-dump "$B"; idx-dump "$A")" ]
	mt-index merge -q -o one "$M"
	cmp one.idx "$M.idx"
	cmp one.bin "$M.bin"
}

@test "merge --input DIR: every pair in DIR in Python's sorted() order, as merge_datasets.py" {
	mkdir d
	names=(b a B a_1 a-2 Z9 'é')
	i=0
	for n in "${names[@]}"; do
		# each dataset a different single document, so the order shows
		printf '%d %d\n' $i $((i + 1)) > "t$i.txt"
		mt-tokenize -q --input "t$i.txt" --input-format text --tokenizer-type NullTokenizer --vocab-size 100 \
			--output-prefix "tmp$i"
		mv "tmp${i}_text_document.bin" "d/$n.bin"
		mv "tmp${i}_text_document.idx" "d/$n.idx"
		i=$((i + 1))
	done
	echo "not a dataset" > d/README
	run -0 mt-index merge -q --input d --output-prefix out
	want=$(python3 -c 'import sys; [print(sys.argv[1] + "/" + n) for n in sorted(sys.argv[2:])]' d "${names[@]}" |
		while read -r p; do idx-dump "$p"; done)
	[ "$(idx-dump out)" = "$want" ]
	# a half without its other half is an error, as there
	touch d/lone.idx
	run -4 --separate-stderr mt-index merge --input d -o out2
	[ "$stderr" = "mt-index: error: 'd/lone.bin' is missing: every dataset in --input 'd' needs both .bin and .idx" ]
	[ ! -e out2.idx ]
	mkdir e
	run -4 --separate-stderr mt-index merge --input e -o out2
	[[ $stderr == *"no datasets in --input 'e'"* ]]
	run -4 --separate-stderr mt-index merge --input nodir -o out2
	[[ $stderr == *"cannot open directory 'nodir'"* ]]
	run -2 --separate-stderr mt-index merge --input d -o out2 "$A"
	[[ $stderr == *"either PREFIX... or --input DIR"* ]]
}

@test "merge: usage errors, a dtype mismatch (exit 3 naming both), an output that is an input" {
	run -2 --separate-stderr mt-index merge "$A" "$B"
	[[ $stderr == "mt-index: error: --output-prefix is required"* ]]
	run -2 --separate-stderr mt-index merge -o out
	[[ $stderr == *"nothing to merge"* ]]
	run -2 --separate-stderr mt-index merge -o out --multimodal "$A"
	run -3 --separate-stderr mt-index merge -o out "$A" "$M" "$B"
	[ "$stderr" = "mt-index: error: '$M.idx' has dtype int32 but '$A.idx' has uint16: datasets merged together must share a dtype" ]
	[ -z "$(ls)" ]
	copy "$A" a
	copy "$B" b
	run -2 --separate-stderr mt-index merge -o a a b
	[[ $stderr == *"--output-prefix 'a' is also the input 'a'"* ]]
	cmp a.idx "$A.idx"
	run -4 --separate-stderr mt-index merge -o nodir/out a b
	[[ $stderr == *"output directory 'nodir' does not exist"* ]]
	[ "$(ls)" = "$(printf 'a.bin\na.idx\nb.bin\nb.idx')" ]
}

@test "merge beyond 2^32 bytes: sparse 4 GiB inputs, 64-bit pointers, tokens past 4 GiB in place" {
	# int32 dataset of 4 documents: one sequence of 2^30 tokens (4 GiB, a hole but its
	# last token, 5), then [7 8 9], an empty document and [11]; written by hand
	python3 - big <<-'EOF'
	import struct, sys
	prefix, n = sys.argv[1], 1 << 30
	lens, ptrs, docs = [n, 3, 1], [0, 4 * n, 4 * n + 12], [0, 1, 2, 2, 3]
	with open(prefix + ".idx", "wb") as f:
	    f.write(b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, 4, 3, 5) + struct.pack("<3i", *lens))
	    f.write(struct.pack("<3q", *ptrs) + struct.pack("<5q", *docs))
	with open(prefix + ".bin", "wb") as f:
	    f.truncate(4 * n + 16)
	    f.seek(4 * n - 4)
	    f.write(struct.pack("<5i", 5, 7, 8, 9, 11))
	EOF
	[ "$(du -k big.bin | cut -f1)" -lt 1024 ] || skip "this filesystem does not keep sparse files"
	run -0 mt-index verify big
	[ "$output" = "ok big: 4 documents, 1073741828 tokens" ]
	start=$(date +%s)
	run -0 mt-index merge -q -o out big big
	elapsed=$(($(date +%s) - start))
	echo "merge of 2 x 4 GiB took $elapsed s"
	run -0 mt-index stat --json out
	[[ $output == *'"documents":8,"empty_documents":2,"sequences":6,"tokens":2147483656,"bin_bytes":8589934624'* ]]
	[ "$(mt-index cat out --docs 1:4)" = "$(printf '7 8 9\n\n11')" ]
	[ "$(mt-index cat out --docs 5:8)" = "$(printf '7 8 9\n\n11')" ]
	python3 - out <<-'EOF'
	import struct, sys
	n = 1 << 30
	idx = open(sys.argv[1] + ".idx", "rb").read()
	assert struct.unpack_from("<9sQBQQ", idx) == (b"MMIDIDX\0\0", 1, 4, 6, 9)
	assert struct.unpack_from("<6i", idx, 34) == (n, 3, 1, n, 3, 1)
	assert struct.unpack_from("<6q", idx, 58) == (0, 4 * n, 4 * n + 12, 4 * n + 16, 8 * n + 16, 8 * n + 28)
	assert struct.unpack_from("<9q", idx, 106) == (0, 1, 2, 2, 3, 4, 5, 5, 6)
	assert len(idx) == 106 + 72
	with open(sys.argv[1] + ".bin", "rb") as f:
	    for off, want in ((4 * n - 4, 5), (4 * n, 7), (4 * n + 12, 11), (8 * n + 12, 5), (8 * n + 16, 7), (8 * n + 28, 11)):
	        f.seek(off)
	        got = struct.unpack("<i", f.read(4))[0]
	        assert got == want, (off, got, want)
	    f.seek(0, 2)
	    assert f.tell() == 8 * n + 32
	EOF
	# the holes stayed holes: the copy did not write 8 GiB of zeros
	[ "$(du -k out.bin | cut -f1)" -lt 1024 ]
}

@test "cat: ids as idx-dump prints them; --docs ranges; --json ids" {
	run -0 --separate-stderr mt-index cat "$M"
	[ "$output" = "$(idx-dump "$M")" ]
	[ "$output" = "$(python3 "$REF/megatron_idx.py" "$M")" ]
	[ "$(mt-index cat "$AB")" = "$(idx-dump "$AB")" ]
	[ "$(mt-index cat "$M" --docs 2:5)" = "$(idx-dump "$M" | sed -n '3,5p')" ]
	[ "$(mt-index cat "$M" --docs 5:)" = "$(idx-dump "$M" | sed -n '6,$p')" ]
	[ "$(mt-index cat "$M" --docs :2)" = "$(idx-dump "$M" | sed -n '1,2p')" ]
	[ "$(mt-index cat "$M" --docs 6)" = "$(idx-dump "$M" | sed -n '7p')" ]
	[ "$(mt-index cat "$M" --docs 3:3)" = "" ]
	[ "$(mt-index cat "$M" --docs 0:7)" = "$(idx-dump "$M")" ]
	run -0 mt-index cat "$M" --json --docs 0:3
	[ "${lines[0]}" = '{"doc":0,"ids":[1,2,3,4,5],"lengths":[3,2]}' ]
	[ "${lines[1]}" = '{"doc":1,"ids":[],"lengths":[]}' ]
	[ "${lines[2]}" = '{"doc":2,"ids":[70000],"lengths":[1]}' ]
	# every document as JSON, read back: the same ids and sequence boundaries
	mt-index cat "$AB" --json | python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    ids, out, k = d["ids"], [], 0
    for n in d["lengths"]:
        out.append(" ".join(map(str, ids[k:k + n])))
        k += n
    print(" | ".join(out))' > got.ids
	idx-dump "$AB" > want.ids
	cmp got.ids want.ids
}

@test "cat: bad --docs ranges are usage errors naming the range" {
	for r in 2:1 0:8 8 -1:2 x 1:y ' :3' 1:2:3; do
		run -2 --separate-stderr mt-index cat "$M" --docs "$r"
		[[ $stderr == "mt-index: error: --docs"* ]] || { echo "$r: $stderr"; false; }
		[ -z "$output" ]
	done
	run -2 --separate-stderr mt-index cat "$M" --docs 0:8
	[[ $stderr == *"has 7 documents (0 to 6)"* ]]
	run -2 --separate-stderr mt-index cat
	run -2 --separate-stderr mt-index cat "$M" "$M"
	run -2 --separate-stderr mt-index cat "$M" --decode
	[[ $stderr == *"--decode needs a tokenizer"* ]]
	run -2 --separate-stderr mt-index cat "$M" --vocab-file x.json
}

@test "cat with a tokenizer: the text mt-tokenize decode gives; --json gives back the corpus" {
	run -0 --separate-stderr mt-index cat "$AB" --docs 10:20 "${GPT2[@]}"
	[ "$output" = "$(mt-tokenize decode "${GPT2[@]}" --dataset "$AB" --docs 10:20)" ]
	run -0 mt-index cat "$AB" --decode "${GPT2[@]}" --docs 0:1
	[[ $output == "Once upon a time"*"<|endoftext|>" ]]
	# every document, as JSON: the original text (GPT-2 is byte-level and lossless) and the eod
	mt-index cat "$AB" --json "${GPT2[@]}" > docs.jsonl
	python3 - docs.jsonl "$F/demo.jsonl" <<-'EOF'
	import json, sys
	got = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
	want = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
	assert len(got) == len(want), (len(got), len(want))
	for i, (g, w) in enumerate(zip(got, want)):
	    assert g["doc"] == i and g["text"] == w + "<|endoftext|>", (i, g, w)
	EOF
	# NullTokenizer: the ids as text
	run -0 mt-index cat "$M" --tokenizer-type NullTokenizer --vocab-size 100000 --docs 0:1
	[ "$output" = "1 2 3 4 5" ]
	# an id the vocabulary does not have is bad data
	run -3 --separate-stderr mt-index cat "$M" "${GPT2[@]}" --docs 2:3
	[[ $stderr == *"document 2: token id 70000 is not in the vocabulary"* ]]
}

@test "cat --json with a tokenizer keeps documents with newlines on one line, invalid UTF-8 as U+FFFD" {
	printf '{"text": "line one\\nline two"}\n{"text": "caf\\u00e9"}\n' > nl.jsonl
	mt-tokenize -q --input nl.jsonl "${GPT2[@]}" --output-prefix nl
	run -0 mt-index cat nl_text_document --json "${GPT2[@]}"
	[ "${#lines[@]}" -eq 2 ]
	[ "${lines[0]}" = '{"doc":0,"text":"line one\nline two"}' ]
	[ "${lines[1]}" = '{"doc":1,"text":"café"}' ]
	# the first byte of "é" alone (GPT-2 token 127 is b"\xc3") is invalid UTF-8
	printf '127\n' > half.txt
	mt-tokenize -q --input half.txt --input-format text --tokenizer-type NullTokenizer --vocab-size 50257 \
		--output-prefix half
	run -0 mt-index cat half_text_document --json "${GPT2[@]}"
	[ "$output" = '{"doc":0,"text":"�"}' ]
}

@test "fuzz: libFuzzer on the reader, the check and the merge finds nothing (skipped without clang)" {
	run "$MT_ROOT/tests/fuzz/run.sh"
	[ "$status" -ne 77 ] || skip "${output##*skip: }"
	printf '%s\n' "$output" | tail -n 40
	[ "$status" -eq 0 ]
	[[ ${lines[-1]} == "ok: fuzz_idx ran "* ]]
}

@test "build: Megatron's GPTDataset caches for each split, identical to the numpy reference; document ranges printed" {
	/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip "Debian's python3-numpy is not installed"
	R="$MT_ROOT/tests/reference/megatron_indices.py"
	/usr/bin/python3 "$R" make-idx --prefix d --lengths "$(/usr/bin/python3 -c '
import random; r = random.Random(3); print(",".join(str(r.randint(1, 90)) for _ in range(1000)))')"
	/usr/bin/python3 "$R" gpt --prefix d --seq-length 24 --split 969,30,1 --seed 7 \
		--num-samples train=2000,valid=300,test=40 --cache-dir ref > ref.txt
	run -0 --separate-stderr mt-index build --data-path d --seq-length 24 --split 969,30,1 --seed 7 \
		--train-samples 2000 --valid-samples 300 --test-samples 40 --data-cache-path mt
	diff -r ref mt
	[ "$(ls mt | wc -l)" -eq 12 ]
	# the document ranges printed are the reference's
	for s in train valid test; do
		read -r _ _ beg end < <(grep "^split $s " ref.txt)
		[[ $output == *"$s: "* ]]
		echo "$output" | awk -v s="$s:" -v beg="$beg" -v n="$((end - beg))" '
			$1 == s { on = 1; next } on && $NF == "d" { if ($2 != n || $3 != beg) exit 1; found = 1; on = 0 }
			END { exit !found }'
	done
}
