#!/usr/bin/env bats
# mt-tokenize: token ids against OpenAI's tiktoken (tests/reference), Megatron's
# .idx/.bin format read back by an independent reader (tests/reference/megatron_idx.py),
# every kind of input, bad data and bad tokenizer files, decode, train, Megatron's
# flags, the summary line, and memory that does not grow with the input.
load helpers

REF=$MT_ROOT/tests/reference
CACHE=$REF/.cache
GPT2=(--tokenizer-type GPT2BPETokenizer --vocab-file "$CACHE/gpt2-vocab.json" --merge-file "$CACHE/gpt2-merges.txt")
NULL100=(--tokenizer-type NullTokenizer --vocab-size 100)

# ref-encode.js lines as Megatron writes documents: the lines of records without the
# key gone (--skip-bad-lines skips those records), empty sentences dropped.
normalize() {
	grep -v '^!missing$' | sed 's/ | \( | \)*/ | /g; s/^ | //; s/ | $//; s/^ | $//'
}

# Once per file, into $BATS_FILE_TMPDIR: the reference packages and vocabularies, the
# corpora, and the reference ids of both hard corpora for the three encodings.
setup_file() {
	"$REF/fetch.sh"
	cd "$BATS_FILE_TMPDIR"
	python3 "$REF/make-hard-corpus.py" > hard.jsonl
	python3 "$REF/make-hard-corpus.py" --recent-unicode > recent.jsonl
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 20000 > demo.jsonl
	# the hard corpus's string documents that are valid UTF-8 (no lone surrogates):
	# those decode back to their exact text
	python3 -c '
import json, sys
for line in sys.stdin:
    t = json.loads(line).get("text")
    if isinstance(t, str):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            continue
        sys.stdout.write(line)' < hard.jsonl > clean.jsonl
	for enc in gpt2 cl100k_base o200k_base; do
		for corpus in hard recent; do
			node "$REF/ref-encode.js" "$enc" < "$corpus.jsonl" > "$corpus.$enc.raw"
			normalize < "$corpus.$enc.raw" > "$corpus.$enc.ids"
		done
	done
}

# Each test works in an empty directory of its own (Bats keeps its own files beside it).
setup() {
	F=$BATS_FILE_TMPDIR
	mkdir "$BATS_TEST_TMPDIR/work"
	cd "$BATS_TEST_TMPDIR/work"
}

# Sets TOK to mt-tokenize's options for a reference encoding name.
use_encoding() {
	case $1 in
	gpt2) TOK=("${GPT2[@]}") ;;
	*) TOK=(--tokenizer-type TikTokenizer --tokenizer-model "$CACHE/$1.tiktoken") ;;
	esac
}

# Two id listings, one document a line, must be equal; else show where they differ.
same_ids() {
	diff "$1" "$2" > ids.diff || { echo "ids differ ($1 vs $2):"; head -n 20 ids.diff; return 1; }
}

# Two datasets (prefixes) must be byte-identical, .bin and .idx.
same_dataset() {
	cmp "$1.bin" "$2.bin" && cmp "$1.idx" "$2.idx"
}

# encode PREFIX INPUT...: GPT-2 ids of JSON lines, quietly.
encode() {
	local prefix=$1
	shift
	mt-tokenize -q --output-prefix "$prefix" "${GPT2[@]}" --input "$@"
}

megatron_idx() {
	python3 "$REF/megatron_idx.py" "$@"
}

# The test's directory holds exactly these names (and so no *.tmp.* files).
only_files() {
	local want got
	want=$(printf '%s\n' "$@" | sort)
	got=$(ls -A | sort)
	[ "$got" = "$want" ] || { printf 'files here:\n%s\nexpected:\n%s\n' "$got" "$want"; return 1; }
}

# Encode corpus $1 with encoding $2, read the dataset back with $3 (idx-dump or
# megatron_idx) and compare with the reference ids.
check_reference() {
	use_encoding "$2"
	run -0 --separate-stderr mt-tokenize --input "$F/$1.jsonl" --output-prefix out "${TOK[@]}" \
		--skip-bad-lines --workers 2
	[ -z "$output" ]
	"$3" out_text_document > got.ids
	same_ids "$F/$1.$2.ids" got.ids
}

# ---- ids against the reference ---------------------------------------------------------

@test "GPT2BPETokenizer: ids equal tiktoken's gpt2 on the hard corpus (>= 1 MB)" {
	[ "$(stat -c %s "$F/hard.jsonl")" -ge 1000000 ]
	check_reference hard gpt2 idx-dump
}

@test "TikTokenizer cl100k_base: ids equal tiktoken's on the hard corpus (read by megatron_idx.py)" {
	check_reference hard cl100k_base megatron_idx
}

@test "TikTokenizer o200k_base: ids equal tiktoken's on the hard corpus (read by megatron_idx.py)" {
	check_reference hard o200k_base megatron_idx
}

@test "ids equal tiktoken's on the Unicode 15.0-16.0 corpus for gpt2, cl100k_base and o200k_base" {
	check_reference recent gpt2 idx-dump
	check_reference recent cl100k_base megatron_idx
	check_reference recent o200k_base megatron_idx
}

@test "--append-eod: GPT-2 ends each non-empty document of the hard corpus with <|endoftext|> (50256)" {
	run -0 --separate-stderr mt-tokenize --input "$F/hard.jsonl" --output-prefix out "${GPT2[@]}" \
		--skip-bad-lines --append-eod
	idx-dump out_text_document > got.ids
	sed '/./s/$/ 50256/' "$F/hard.gpt2.ids" > want.ids
	same_ids want.ids got.ids
}

@test "output bytes do not depend on --workers (1, 2 and 4), over many batches" {
	for w in 1 2 4; do
		mt-tokenize -q --input "$F/hard.jsonl" "$F/demo.jsonl" --output-prefix w$w "${GPT2[@]}" \
			--skip-bad-lines --append-eod --workers $w
	done
	# ~10 MB of text: several 1 MiB batches in flight at once
	[ "$(stat -c %s w1_text_document.bin)" -gt 4000000 ]
	same_dataset w1_text_document w2_text_document
	same_dataset w1_text_document w4_text_document
}

# ---- inputs ------------------------------------------------------------------------------

@test "gzip, xz, zstd and bzip2 inputs give the same bytes as the plain file" {
	cp "$F/demo.jsonl" demo.jsonl
	encode plain demo.jsonl
	gzip -k demo.jsonl
	xz -k -T1 demo.jsonl
	zstd -q demo.jsonl
	bzip2 -k demo.jsonl
	for ext in gz xz zst bz2; do
		encode "$ext" "demo.jsonl.$ext"
		same_dataset plain_text_document "${ext}_text_document"
	done
}

@test "stdin (plain and compressed) gives the same bytes as the file" {
	encode plain "$F/demo.jsonl"
	mt-tokenize -q --output-prefix stdin "${GPT2[@]}" --input - < "$F/demo.jsonl"
	same_dataset plain_text_document stdin_text_document
	xz -T1 -c "$F/demo.jsonl" | mt-tokenize -q --output-prefix xzin "${GPT2[@]}" --input -
	same_dataset plain_text_document xzin_text_document
}

@test "three shards as a glob, a tar.gz and a zip give the same bytes as the whole; listed order is kept" {
	encode plain "$F/demo.jsonl"
	split -n l/3 -d -a 1 --additional-suffix=.jsonl "$F/demo.jsonl" shard_
	cat shard_0.jsonl shard_1.jsonl shard_2.jsonl | cmp - "$F/demo.jsonl"
	encode glob 'shard_*.jsonl'
	same_dataset plain_text_document glob_text_document
	tar czf shards.tar.gz shard_0.jsonl shard_1.jsonl shard_2.jsonl
	encode tgz shards.tar.gz
	same_dataset plain_text_document tgz_text_document
	zip -q shards.zip shard_0.jsonl shard_1.jsonl shard_2.jsonl
	encode zip shards.zip
	same_dataset plain_text_document zip_text_document
	# explicit inputs are read in the order given, not sorted
	encode listed shard_2.jsonl shard_0.jsonl shard_1.jsonl
	cat shard_2.jsonl shard_0.jsonl shard_1.jsonl > reordered.jsonl
	encode reordered reordered.jsonl
	same_dataset reordered_text_document listed_text_document
	run ! same_dataset plain_text_document listed_text_document
}

@test "gzip data in a file named .txt is detected by content" {
	encode plain "$F/demo.jsonl"
	gzip -c "$F/demo.jsonl" > misnamed.txt
	encode misnamed misnamed.txt
	same_dataset plain_text_document misnamed_text_document
}

# ---- Megatron's format -------------------------------------------------------------------

# NullTokenizer reads ids: documents 1 and 4 are empty, 3 and 5 are pre-split lists
# holding empty sentences.
tiny_corpus() {
	cat > tiny.jsonl <<-'EOF'
		{"text": "1 2 3"}
		{"text": ""}
		{"text": "7"}
		{"text": ["4 5", "", "6"]}
		{"text": []}
		{"text": ["", "8", ""]}
	EOF
}

# The first 34 bytes of an .idx file as hex.
idx_header_hex() {
	head -c 34 "$1" | od -An -v -tx1 | tr -d ' \n'
}

@test "Megatron format: exact .idx header, lengths, pointers and document index with empty documents" {
	tiny_corpus
	run -0 --separate-stderr mt-tokenize -q --input tiny.jsonl --output-prefix t "${NULL100[@]}"
	# magic MMIDIDX\0\0, version 1 (u64), dtype 8 = uint16 (u8), S = 5, D = 6 documents + 1
	[ "$(idx_header_hex t_text_document.idx)" = \
		"4d4d4944494458000001000000000000000805000000000000000700000000000000" ]
	[ "$(stat -c %s t_text_document.idx)" -eq $((34 + 12 * 5 + 8 * 7)) ]
	[ "$(od -An -v -tu2 t_text_document.bin | xargs)" = "1 2 3 7 4 5 6 8" ]
	run -0 megatron_idx --header t_text_document
	[ "$output" = $'version 1\ndtype 8 uint16\nsequences 5\ndocuments 6' ]
	run -0 megatron_idx --index t_text_document
	[ "${lines[0]}" = "lengths 3 1 2 1 1" ]
	[ "${lines[1]}" = "pointers 0 6 8 12 14" ]
	# an empty document repeats the index (documents 1 and 4)
	[ "${lines[2]}" = "doc_idx 0 1 1 2 4 4 5" ]
	run -0 megatron_idx t_text_document
	[ "$output" = $'1 2 3\n\n7\n4 5 | 6\n\n8' ]
	# our own reader agrees
	[ "$(idx-dump t_text_document)" = "$output" ]
}

@test "Megatron format: --append-eod adds eod (= vocab-size) to non-empty documents, in the last sequence" {
	tiny_corpus
	run -0 --separate-stderr mt-tokenize -q --input tiny.jsonl --output-prefix t "${NULL100[@]}" --append-eod
	[ "$(idx_header_hex t_text_document.idx)" = \
		"4d4d4944494458000001000000000000000805000000000000000700000000000000" ]
	[ "$(od -An -v -tu2 t_text_document.bin | xargs)" = "1 2 3 100 7 100 4 5 6 100 8 100" ]
	run -0 megatron_idx --index t_text_document
	[ "${lines[0]}" = "lengths 4 2 2 2 2" ]
	[ "${lines[1]}" = "pointers 0 8 12 16 20" ]
	[ "${lines[2]}" = "doc_idx 0 1 1 2 4 4 5" ]
	run -0 megatron_idx t_text_document
	[ "$output" = $'1 2 3 100\n\n7 100\n4 5 | 6 100\n\n8 100' ]
}

@test "Megatron format: an empty input is a valid empty dataset" {
	: > empty.jsonl
	run -0 --separate-stderr mt-tokenize -q --input empty.jsonl --output-prefix e "${GPT2[@]}"
	run -0 megatron_idx --header e_text_document
	[ "$output" = $'version 1\ndtype 8 uint16\nsequences 0\ndocuments 0' ]
	[ "$(stat -c %s e_text_document.bin)" -eq 0 ]
}

@test "Megatron format: int32 (code 4) for vocabularies of 65500 or more, uint16 (code 8) below" {
	head -n 200 "$F/demo.jsonl" > small.jsonl
	use_encoding cl100k_base
	mt-tokenize -q --input small.jsonl --output-prefix cl "${TOK[@]}"
	run -0 megatron_idx --header cl_text_document
	[ "${lines[1]}" = "dtype 4 int32" ]
	node "$REF/ref-encode.js" cl100k_base < small.jsonl > want.ids
	megatron_idx cl_text_document > got.ids
	same_ids want.ids got.ids
	[ "$(stat -c %s cl_text_document.bin)" -eq $((4 * $(wc -w < want.ids))) ]
	local hex
	hex=$(idx_header_hex cl_text_document.idx)
	[ "${hex:34:2}" = 04 ]

	encode g small.jsonl
	run -0 megatron_idx --header g_text_document
	[ "${lines[1]}" = "dtype 8 uint16" ]
	# NullTokenizer counts its eod in the vocabulary: 65498 + 1 < 65500 <= 65499 + 1
	echo '{"text": "1 2"}' > ids.jsonl
	mt-tokenize -q --input ids.jsonl --output-prefix n1 --tokenizer-type NullTokenizer --vocab-size 65498
	mt-tokenize -q --input ids.jsonl --output-prefix n2 --tokenizer-type NullTokenizer --vocab-size 65499
	run -0 megatron_idx --header n1_text_document
	[ "${lines[1]}" = "dtype 8 uint16" ]
	run -0 megatron_idx --header n2_text_document
	[ "${lines[1]}" = "dtype 4 int32" ]
}

@test "several --json-keys write one dataset per key, each equal to the reference for its key" {
	cat > keys.jsonl <<-'EOF'
		{"text": "Hello world", "title": "Greeting"}
		{"title": "", "text": "Bye"}
		{"text": ["a", "b"], "title": ["List", "", "of two"]}
	EOF
	run -0 --separate-stderr mt-tokenize --input keys.jsonl --json-keys text title --output-prefix P "${GPT2[@]}"
	[ -z "$output" ]
	only_files keys.jsonl P_text_document.bin P_text_document.idx P_title_document.bin P_title_document.idx
	for key in text title; do
		node "$REF/ref-encode.js" gpt2 --key $key < keys.jsonl | normalize > want.ids
		megatron_idx P_${key}_document > got.ids
		same_ids want.ids got.ids
	done
	# the empty title is an empty document: both datasets hold 3 documents
	[ "$(megatron_idx --header P_title_document | tail -n 1)" = "documents 3" ]
	[ "$(megatron_idx --header P_text_document | tail -n 1)" = "documents 3" ]
	# a record without one of the keys is bad data, naming the key
	echo '{"text": "no title"}' >> keys.jsonl
	run -3 --separate-stderr mt-tokenize --input keys.jsonl --json-keys text title --output-prefix Q "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: 'keys.jsonl':4: key 'title' not found" ]
}

# ---- plain text --------------------------------------------------------------------------

# Encode text file(s) with --text-split $1 and compare with the reference ids of the
# documents in want.jsonl.
check_text_split() {
	local split=$1
	shift
	run -0 --separate-stderr mt-tokenize -q --input "$@" --input-format text --text-split "$split" \
		--output-prefix T "${GPT2[@]}"
	idx-dump T_text_document > got.ids
	node "$REF/ref-encode.js" gpt2 < want.jsonl > want.ids
	same_ids want.ids got.ids
}

@test "text, --text-split line: one document per line, CRLF stripped, an empty line an empty document" {
	printf 'line one\r\nline two\n\n  \nlast' > t.txt
	cat > want.jsonl <<-'EOF'
		{"text": "line one"}
		{"text": "line two"}
		{"text": ""}
		{"text": "  "}
		{"text": "last"}
	EOF
	check_text_split line t.txt
	# line is the default
	mt-tokenize -q --input t.txt --input-format text --output-prefix D "${GPT2[@]}"
	same_dataset T_text_document D_text_document
}

@test "text, --text-split paragraph: blank-line separated, lines joined by \\n, CRLF stripped" {
	printf '\n\npara one\r\nstill one\n\n\n  \t\npara two\n\nthree' > p.txt
	cat > want.jsonl <<-'EOF'
		{"text": "para one\nstill one"}
		{"text": "para two"}
		{"text": "three"}
	EOF
	check_text_split paragraph p.txt
}

@test "text, --text-split file: each file and each tar member is one document, byte for byte" {
	printf 'file one\nline2\n' > f1.txt
	printf 'file two' > f2.txt
	tar czf fs.tgz f1.txt f2.txt
	cat > want.jsonl <<-'EOF'
		{"text": "file one\nline2\n"}
		{"text": "file one\nline2\n"}
		{"text": "file two"}
		{"text": "file two"}
	EOF
	check_text_split file f1.txt fs.tgz f2.txt
}

# ---- bad input ---------------------------------------------------------------------------

@test "malformed JSON: exit 3 naming file and line, and no output files at all" {
	printf '%s\n' '{"text": "a"}' '{"text": "b"}' '{"text": "c"' '{"text": "d"}' > x.jsonl
	run -3 --separate-stderr mt-tokenize --input x.jsonl --output-prefix o "${GPT2[@]}"
	[ -z "$output" ]
	[[ $stderr == "mt-tokenize: error: 'x.jsonl':3: invalid JSON "* ]] || { echo "$stderr"; false; }
	[ "${#stderr_lines[@]}" -eq 1 ]
	only_files x.jsonl
}

@test "a bad line deep in a large input names its line; a previous output stays as it was" {
	{ head -n 14999 "$F/demo.jsonl"; echo '{"text": oops}'; tail -n +15000 "$F/demo.jsonl"; } > big.jsonl
	encode o "$F/demo.jsonl"
	cp o_text_document.bin old.bin
	cp o_text_document.idx old.idx
	run -3 --separate-stderr mt-tokenize --input big.jsonl --output-prefix o "${GPT2[@]}" --workers 2
	[[ $stderr == "mt-tokenize: error: 'big.jsonl':15000: invalid JSON "* ]] || { echo "$stderr"; false; }
	cmp old.bin o_text_document.bin
	cmp old.idx o_text_document.idx
	only_files big.jsonl old.bin old.idx o_text_document.bin o_text_document.idx
}

@test "a missing key, a non-string value, a bad list item, a non-object line: exit 3, file and line named" {
	printf '%s\n' '{"text": "a"}' '{"text": "b"}' '{"title": "c"}' > m.jsonl
	run -3 --separate-stderr mt-tokenize --input m.jsonl --output-prefix o "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: 'm.jsonl':3: key 'text' not found" ]
	printf '%s\n' '{"text": "a"}' '{"text": 5}' > v.jsonl
	run -3 --separate-stderr mt-tokenize --input v.jsonl --output-prefix o "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: 'v.jsonl':2: key 'text' is neither a string nor a list of strings" ]
	printf '%s\n' '{"text": ["d", 1]}' > l.jsonl
	run -3 --separate-stderr mt-tokenize --input l.jsonl --output-prefix o "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: 'l.jsonl':1: key 'text': item 1 of the list is not a string" ]
	printf '%s\n' '{"text": "a"}' '' '[1]' > a.jsonl
	run -3 --separate-stderr mt-tokenize --input a.jsonl --output-prefix o "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: 'a.jsonl':3: line is not a JSON object" ]
	only_files m.jsonl v.jsonl l.jsonl a.jsonl
}

@test "a bad record inside an archive or on stdin names the member or <stdin> and the line" {
	head -n 100 "$F/demo.jsonl" > a.jsonl
	{ head -n 9 "$F/demo.jsonl"; echo '{"nokey": 1}'; } > b.jsonl
	tar czf ab.tgz a.jsonl b.jsonl
	run -3 --separate-stderr mt-tokenize --input ab.tgz --output-prefix o "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: 'ab.tgz:b.jsonl':10: key 'text' not found" ]
	run -3 --separate-stderr mt-tokenize --input - --output-prefix o "${GPT2[@]}" < b.jsonl
	[ "$stderr" = "mt-tokenize: error: '<stdin>':10: key 'text' not found" ]
	only_files a.jsonl b.jsonl ab.tgz
}

@test "--skip-bad-lines: exit 0, the good records only, each skipped line warned about and counted" {
	printf '%s\n' '{"text": "a"}' '{"text": 5}' '{"text": "c"' '{"title": "x"}' '{"text": ["d", 1]}' '{"text": "e"}' > s.jsonl
	run -0 --separate-stderr mt-tokenize --input s.jsonl --output-prefix o "${GPT2[@]}" --skip-bad-lines
	[ "$(idx-dump o_text_document)" = $'64\n68' ]
	[[ ${stderr_lines[0]} == "mt-tokenize: warning: skipping 's.jsonl':2: key 'text' is neither"* ]]
	[[ ${stderr_lines[1]} == "mt-tokenize: warning: skipping 's.jsonl':3: invalid JSON"* ]]
	[[ ${stderr_lines[2]} == "mt-tokenize: warning: skipping 's.jsonl':4: key 'text' not found" ]]
	[[ ${stderr_lines[3]} == "mt-tokenize: warning: skipping 's.jsonl':5: key 'text': item 1"* ]]
	[[ ${stderr_lines[4]} == "mt-tokenize: 2 documents, "*"; 0 empty, 4 skipped, 0 replaced with U+FFFD; "* ]]
	[ "${#stderr_lines[@]}" -eq 5 ]
}

@test "a truncated .gz input: exit 3 naming the file, no output files, even with --skip-bad-lines" {
	gzip -c "$F/demo.jsonl" > full.jsonl.gz
	head -c $(($(stat -c %s full.jsonl.gz) / 2)) full.jsonl.gz > cut.jsonl.gz
	rm full.jsonl.gz
	run -3 --separate-stderr mt-tokenize --input cut.jsonl.gz --output-prefix o "${GPT2[@]}"
	[[ $stderr == "mt-tokenize: error: "*"'cut.jsonl.gz'"* ]] || { echo "$stderr"; false; }
	only_files cut.jsonl.gz
	run -3 --separate-stderr mt-tokenize --input cut.jsonl.gz --output-prefix o "${GPT2[@]}" --skip-bad-lines
	[[ $stderr == "mt-tokenize: error: "*"'cut.jsonl.gz'"* ]]
	only_files cut.jsonl.gz
}

@test "invalid UTF-8 in text input becomes U+FFFD as Python's decode(errors='replace') does it" {
	# lone and truncated sequences, overlong forms, encoded surrogates, beyond U+10FFFF
	python3 - <<-'EOF'
		import json
		lines = [b'caf\xe9 au lait', b'ok \xff\xfe end', b'\xc3', b'a\xe2\x82b', b'surr \xed\xa0\x80 x',
		         b'over \xf0\x80\x80\x80 y', b'\xc0\xaf', b'big \xf4\x90\x80\x80', b'\xe0\x80\x80',
		         b'mix \xe2\x82\xac\xe2\x82 \xf0\x9f\x98\x80\xf0\x9f\x98', b'\x80\x80abc\xbf', b'\xf0\x9f\x98']
		open('bad.txt', 'wb').write(b'\n'.join(lines) + b'\n')
		with open('want.jsonl', 'w') as f:
		    for l in lines:
		        f.write(json.dumps({"text": l.decode('utf-8', 'replace')}) + '\n')
		open('count', 'w').write(str(sum(l.decode('utf-8', 'replace').count('\ufffd') for l in lines)))
	EOF
	run -0 --separate-stderr mt-tokenize --input bad.txt --input-format text --output-prefix u "${GPT2[@]}"
	idx-dump u_text_document > got.ids
	node "$REF/ref-encode.js" gpt2 < want.jsonl > want.ids
	same_ids want.ids got.ids
	[[ $stderr == *" $(cat count) replaced with U+FFFD; "* ]] || { echo "$stderr"; false; }
}

# ---- tokenizer files ---------------------------------------------------------------------

@test "a vocab.json that does not parse: exit 3 naming the file and line" {
	echo '{"text": "hello"}' > h.jsonl
	printf '{"a": 0,\n "b": 1,\n "c" 2}\n' > vocab.json
	run -3 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type GPT2BPETokenizer \
		--vocab-file vocab.json --merge-file "$CACHE/gpt2-merges.txt"
	[[ $stderr == "mt-tokenize: error: vocabulary 'vocab.json':3:"* ]] || { echo "$stderr"; false; }
	only_files h.jsonl vocab.json
}

@test "a merges.txt line with three tokens, or a token not in the vocabulary: exit 3 naming file and line" {
	echo '{"text": "hello"}' > h.jsonl
	{ head -n 5 "$CACHE/gpt2-merges.txt"; echo "a b c"; tail -n +6 "$CACHE/gpt2-merges.txt"; } > three.txt
	run -3 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type GPT2BPETokenizer \
		--vocab-file "$CACHE/gpt2-vocab.json" --merge-file three.txt
	[ "$stderr" = "mt-tokenize: error: merges 'three.txt':6: expected two tokens separated by one space" ]
	{ head -n 9 "$CACHE/gpt2-merges.txt"; echo "Ġzzzqqq xyzzyq"; tail -n +10 "$CACHE/gpt2-merges.txt"; } > unknown.txt
	run -3 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type GPT2BPETokenizer \
		--vocab-file "$CACHE/gpt2-vocab.json" --merge-file unknown.txt
	[[ $stderr == "mt-tokenize: error: merges 'unknown.txt':10: 'Ġzzzqqq' is not in the vocabulary "* ]] ||
		{ echo "$stderr"; false; }
	only_files h.jsonl three.txt unknown.txt
}

@test "a tiktoken file of unknown name: no pattern -> exit 2; --append-eod without an eod -> exit 2; --eod-id fixes it" {
	echo '{"text": "hello world"}' > h.jsonl
	cp "$CACHE/r50k_base.tiktoken" custom.tiktoken
	run -2 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type TikTokenizer \
		--tokenizer-model custom.tiktoken
	[[ $stderr == "mt-tokenize: error: no pre-tokenization pattern is known for 'custom.tiktoken'"* ]]
	run -2 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type TikTokenizer \
		--tokenizer-model custom.tiktoken --tiktoken-pattern gpt2 --append-eod
	[ "$stderr" = "mt-tokenize: error: --append-eod: this tokenizer has no end-of-document token; give --eod-id" ]
	only_files h.jsonl custom.tiktoken
	run -0 --separate-stderr mt-tokenize -q --input h.jsonl --output-prefix o --tokenizer-type TikTokenizer \
		--tokenizer-model custom.tiktoken --tiktoken-pattern gpt2 --append-eod --eod-id 50255
	[ "$(idx-dump o_text_document)" = "31373 995 50255" ]
	run -2 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type TikTokenizer \
		--tokenizer-model custom.tiktoken --tiktoken-pattern gpt2 --append-eod --eod-id 50256
	[[ $stderr == "mt-tokenize: error: --eod-id 50256 is outside the vocabulary"* ]]
}

@test "an unknown --tokenizer-type is a usage error, exit 2; a missing vocabulary file exit 4" {
	echo '{"text": "hello"}' > h.jsonl
	run -2 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type BertWordPieceCase
	[[ $stderr == "mt-tokenize: error: unknown --tokenizer-type 'BertWordPieceCase'"* ]]
	run -2 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o
	[[ $stderr == "mt-tokenize: error: --tokenizer-type is required"* ]]
	run -4 --separate-stderr mt-tokenize --input h.jsonl --output-prefix o --tokenizer-type GPT2BPETokenizer \
		--vocab-file nope.json --merge-file "$CACHE/gpt2-merges.txt"
	[[ $stderr == "mt-tokenize: error: cannot read vocabulary 'nope.json'"* ]]
	only_files h.jsonl
}

# ---- decode ------------------------------------------------------------------------------

# The "text" of every line of a JSON-lines file, each followed by \n, as raw UTF-8.
texts_of() {
	python3 -c '
import json, sys
out = sys.stdout.buffer
for line in open(sys.argv[1], encoding="utf-8"):
    out.write(json.loads(line)["text"].encode("utf-8") + b"\n")' "$1"
}

@test "decode --dataset reproduces the demo corpus's texts exactly; --docs A:B a range of them" {
	encode d "$F/demo.jsonl"
	texts_of "$F/demo.jsonl" > want.txt
	mt-tokenize decode "${GPT2[@]}" --dataset d_text_document > got.txt 2> err.txt
	cmp want.txt got.txt
	[ ! -s err.txt ]
	sed -n '3,5p' "$F/demo.jsonl" > three.jsonl
	texts_of three.jsonl > want3.txt
	mt-tokenize decode "${GPT2[@]}" --dataset d_text_document --docs 2:5 > got3.txt
	cmp want3.txt got3.txt
}

@test "decode --dataset reproduces the valid-UTF-8 hard-corpus texts exactly, for all three encodings" {
	texts_of "$F/clean.jsonl" > want.txt
	[ "$(wc -l < "$F/clean.jsonl")" -gt 1500 ]
	for enc in gpt2 cl100k_base o200k_base; do
		use_encoding $enc
		mt-tokenize -q --input "$F/clean.jsonl" --output-prefix $enc "${TOK[@]}"
		mt-tokenize decode "${TOK[@]}" --dataset ${enc}_text_document > got.txt
		cmp want.txt got.txt
	done
}

@test "decode ids from arguments and lines of ids from stdin; a bad id is an error" {
	run -0 --separate-stderr mt-tokenize decode "${GPT2[@]}" 15496 11 995 0
	[ "$output" = "Hello, world!" ]
	[ -z "$stderr" ]
	run -0 --separate-stderr mt-tokenize decode "${GPT2[@]}" 15496 50256
	[ "$output" = "Hello<|endoftext|>" ]
	printf '15496 995\n\n15496,11\n' > ids.txt
	mt-tokenize decode "${GPT2[@]}" < ids.txt > got.txt
	printf 'Hello world\n\nHello,\n' | cmp - got.txt
	run -3 --separate-stderr mt-tokenize decode "${GPT2[@]}" 99999999
	[ "$stderr" = "mt-tokenize: error: token id 99999999 is not in the vocabulary" ]
	run -2 --separate-stderr mt-tokenize decode "${GPT2[@]}" abc
	[[ $stderr == "mt-tokenize: error: 'abc' is not a token id"* ]]
	run -3 --separate-stderr mt-tokenize decode "${GPT2[@]}" <<< $'15496\n1 x'
	[ "$stderr" = "mt-tokenize: error: <stdin>:2: 'x' is not a token id" ]
}

# ---- train -------------------------------------------------------------------------------

# ids of the "text" of each JSON line from tiktoken's core given the ranks of a
# GPT-2-format vocabulary (id = rank) and GPT-2's pattern: node rank-encode.js VOCAB < JSONL
write_rank_encoder() {
	cat > rank-encode.js <<-'EOF'
		const path = require("path"), fs = require("fs"), readline = require("readline");
		const { Tiktoken } = require(path.join(process.argv[2], "node_modules", "tiktoken"));
		const u2b = new Map();
		for (let b = 0, extra = 0; b < 256; b++) {
			const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
			u2b.set(String.fromCodePoint(printable ? b : 256 + extra++), b);
		}
		const special = {}, byRank = [];
		for (const [tok, id] of Object.entries(JSON.parse(fs.readFileSync(process.argv[3], "utf8")))) {
			if (tok === "<|endoftext|>") special[tok] = id;
			else byRank[id] = Buffer.from([...tok].map((c) => u2b.get(c))).toString("base64");
		}
		const enc = new Tiktoken("! 0 " + byRank.join(" ") + "\n", special,
			"'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
		const out = [];
		readline.createInterface({ input: process.stdin })
			.on("line", (l) => out.push(enc.encode_ordinary(JSON.parse(l).text).join(" ")))
			.on("close", () => process.stdout.write(out.join("\n") + "\n"));
	EOF
}

@test "train: vocab.json + merges.txt, deterministic, loadable, round-trips, and encodes as tiktoken with its ranks" {
	cat "$F/clean.jsonl" "$F/demo.jsonl" > corpus.jsonl
	run -0 --separate-stderr mt-tokenize train --input corpus.jsonl --vocab-size 1000 --output-prefix A
	[ -z "$output" ]
	mt-tokenize train -q --input corpus.jsonl --vocab-size 1000 --output-prefix B
	cmp A-vocab.json B-vocab.json
	cmp A-merges.txt B-merges.txt
	# 256 bytes + 743 merges + <|endoftext|>, ids 0..999
	run -0 python3 -c '
import json
v = json.load(open("A-vocab.json"))
print(len(v), sorted(v.values()) == list(range(len(v))), v["<|endoftext|>"])'
	[ "$output" = "1000 True 999" ]
	[ "$(head -n 1 A-merges.txt)" = "#version: 0.2" ]
	[ "$(wc -l < A-merges.txt)" -eq 744 ]
	TRAINED=(--tokenizer-type GPT2BPETokenizer --vocab-file A-vocab.json --merge-file A-merges.txt)
	mt-tokenize -q --input corpus.jsonl --output-prefix c "${TRAINED[@]}"
	texts_of corpus.jsonl > want.txt
	mt-tokenize decode "${TRAINED[@]}" --dataset c_text_document > got.txt
	cmp want.txt got.txt
	write_rank_encoder
	node rank-encode.js "$CACHE" A-vocab.json < corpus.jsonl > want.ids
	idx-dump c_text_document > got.ids
	same_ids want.ids got.ids
}

@test "train: --vocab-size below 257 is a usage error, exit 2" {
	run -2 --separate-stderr mt-tokenize train --input "$F/demo.jsonl" --vocab-size 256 --output-prefix X
	[[ $stderr == "mt-tokenize: error: --vocab-size is required and must be at least 257"* ]]
	run -2 --separate-stderr mt-tokenize train --input "$F/demo.jsonl" --output-prefix X
	only_files
}

# ---- Megatron's flags, the summary -------------------------------------------------------

@test "Megatron's flags are accepted and change nothing in the output" {
	encode plain "$F/demo.jsonl"
	run -0 --separate-stderr mt-tokenize --input "$F/demo.jsonl" --output-prefix m "${GPT2[@]}" --workers 2 \
		--partitions 2 --dataset-impl mmap --keep-sequential-samples --keep-newlines --log-interval 5000
	[ -z "$output" ]
	same_dataset plain_text_document m_text_document
	# one status line per 5000 documents, as Megatron's "Processed N documents"
	run -0 grep -c '^mt-tokenize: processed [0-9]* documents ([0-9.]* docs/s, [0-9.]* MB/s)$' <<< "$stderr"
	[ "$output" = 4 ]
	[[ $stderr == *"processed 20000 documents ("* ]]
}

@test "--split-sentences and --dataset-impl lazy or cached are usage errors, exit 2, with a message" {
	run -2 --separate-stderr mt-tokenize --input "$F/demo.jsonl" --output-prefix m "${GPT2[@]}" --split-sentences
	[[ ${stderr_lines[0]} == "mt-tokenize: error: --split-sentences is not supported: give pre-split documents as JSON lists"* ]]
	for impl in lazy cached; do
		run -2 --separate-stderr mt-tokenize --input "$F/demo.jsonl" --output-prefix m "${GPT2[@]}" --dataset-impl $impl
		[ "${stderr_lines[0]}" = "mt-tokenize: error: --dataset-impl '$impl' is not supported: only mmap" ]
	done
	only_files
}

@test "the summary line gives documents, tokens, bytes, seconds and MB/s; stdout stays empty" {
	run -0 --separate-stderr mt-tokenize --input "$F/hard.jsonl" --output-prefix s "${GPT2[@]}" \
		--skip-bad-lines --workers 2
	[ -z "$output" ]
	local docs tokens mb missing empty
	docs=$(wc -l < "$F/hard.gpt2.ids")
	tokens=$(tr -d '|' < "$F/hard.gpt2.ids" | wc -w)
	missing=$(grep -c '^!missing$' "$F/hard.gpt2.raw")
	empty=$(grep -c '^$' "$F/hard.gpt2.ids")
	# text bytes: the documents' text as JSON decodes it (UTF-8; a lone surrogate is 3
	# bytes, as U+FFFD is), skipped records not counted, JSON syntax never
	mb=$(python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1], encoding="utf-8", errors="surrogateescape"):
    try:
        t = json.loads(line)["text"]
    except Exception:
        continue
    parts = [t] if isinstance(t, str) else t if isinstance(t, list) and all(isinstance(x, str) for x in t) else None
    if parts is not None:
        n += sum(len(x.encode("utf-8", "surrogatepass")) for x in parts)
print("%.2f" % (n / 1e6))' "$F/hard.jsonl")
	local summary=${stderr_lines[${#stderr_lines[@]} - 1]} re
	re="^mt-tokenize: $docs documents, $tokens tokens, $mb MB of text in [0-9]+\.[0-9]{2} s \([0-9.]+ MB/s\), "
	re+="2 workers, uint16; $empty empty, $missing skipped, [0-9]+ replaced with U\+FFFD; "
	re+="wrote s_text_document\.\{bin,idx\}$"
	echo "summary: $summary"
	echo "pattern: $re"
	[[ $summary =~ $re ]]
	# the first ten skipped records are named, then the summary
	[ "$(grep -c '^mt-tokenize: warning: skipping ' <<< "$stderr")" -eq $((missing < 10 ? missing : 10)) ]
	[ "${#stderr_lines[@]}" -eq $(((missing < 10 ? missing : 10) + 1)) ]
}

@test "-q prints nothing on success" {
	run -0 --separate-stderr mt-tokenize -q --input "$F/demo.jsonl" --output-prefix q "${GPT2[@]}"
	[ -z "$output" ]
	[ -z "$stderr" ]
	run -0 --separate-stderr mt-tokenize train -q --input "$F/demo.jsonl" --vocab-size 300 --output-prefix T
	[ -z "$output" ]
	[ -z "$stderr" ]
}

@test "-q as the last option also prints nothing on success" {
	run -0 --separate-stderr mt-tokenize --input "$F/demo.jsonl" --output-prefix q "${GPT2[@]}" -q
	[ -z "$stderr" ]
	run -0 --separate-stderr mt-tokenize train --input "$F/demo.jsonl" --vocab-size 300 --output-prefix T --quiet
	[ -z "$stderr" ]
}

@test "an output directory that does not exist: exit 4 with one clean error line" {
	echo '{"text": "hello"}' > h.jsonl
	run -4 --separate-stderr mt-tokenize --input h.jsonl --output-prefix nodir/o "${GPT2[@]}"
	[ "$stderr" = "mt-tokenize: error: output directory 'nodir' does not exist" ]
}

# ---- memory ------------------------------------------------------------------------------

# N copies of the demo corpus (7.7 MB each) on stdout.
demo_copies() {
	local i
	for ((i = 0; i < $1; i++)); do
		cat "$F/demo.jsonl"
	done
}

# Sets RSS to the peak resident set size in kB of an encode of $1 demo copies from
# stdin with 2 workers; checks the exit status and document count, deletes the output.
peak_rss_kb() {
	demo_copies "$1" | /usr/bin/time -v mt-tokenize --input - --output-prefix mem "${GPT2[@]}" --workers 2 \
		2> time.log > /dev/null
	grep -q 'Exit status: 0' time.log || { cat time.log; return 1; }
	grep -q "^mt-tokenize: $(($1 * 20000)) documents, " time.log || { cat time.log; return 1; }
	rm -f mem_text_document.bin mem_text_document.idx
	RSS=$(sed -n 's/^.*Maximum resident set size (kbytes): //p' time.log)
	[ -n "$RSS" ]
}

@test "memory is bounded: 2 GB of JSON lines on stdin peak under 150 MB RSS, within 25% of a 200 MB run" {
	[ -x /usr/bin/time ] || skip "GNU time (/usr/bin/time) not installed"
	local small big
	peak_rss_kb 27 # 207 MB of text
	small=$RSS
	peak_rss_kb 270 # 2.07 GB of text, 5.4 M documents
	big=$RSS
	echo "peak RSS: ${small} kB for 207 MB, ${big} kB for 2.07 GB"
	# design bound: (2 x 2 + 2) batches of ~1 MiB text and its ids, ~8 MiB per worker's
	# encoder, GPT-2's tables; measured 52 MB for both sizes (x86-64, 2 cores, 2026-11)
	[ "$big" -lt 150000 ]
	[ $((big * 4)) -le $((small * 5)) ]
	only_files time.log
}

@test "JSON records: accepted, refused and decoded exactly as Python's json module does, on 5000 mutated lines" {
	head -n 300 "$BATS_FILE_TMPDIR/hard.jsonl" > h.jsonl
	python3 "$MT_ROOT/tests/reference/json-check.py" --mutate 7 5000 < h.jsonl > mut.jsonl
	cat h.jsonl >> mut.jsonl
	python3 "$MT_ROOT/tests/reference/json-check.py" < mut.jsonl > py.txt
	jsontext-check < mut.jsonl > c.txt
	[ "$(wc -l < c.txt)" -eq 5300 ]
	[ "$(grep -c '^err$' py.txt)" -gt 1000 ]   # the mutations do produce bad lines
	[ "$(grep -vc '^err$\|^missing$\|^nottext$' py.txt)" -gt 400 ] # and good ones
	cmp py.txt c.txt
}
