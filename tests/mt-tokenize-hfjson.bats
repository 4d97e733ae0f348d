#!/usr/bin/env bats
# tokenizer.json beyond the model: normalizers and post-processor templates, and a clear
# error for each component mt does not read. Hugging Face's tokenizers library is not in
# Debian, so the references are the format's documented semantics on top of tiktoken:
#   - the files are GPT-2's vocabulary written as tokenizer.json by
#     tests/reference/make-hf-tokenizer.py (byte-level BPE, <|endoftext|> an added token);
#   - the expected ids are tiktoken's gpt2 (npm, tests/reference/ref-encode.js) with
#     special tokens allowed (an added token in the text is matched, as Hugging Face does)
#     on the text after the normalizer, as tests/reference/unicode9-normalize.py gives it
#     (Hugging Face's Unicode 9.0 tables: Python's unicodedata between the code points
#     assigned after 9.0, those kept as they are), with the template's ids around each
#     string (TemplateProcessing "single": [BOS] $A [EOS]).
load helpers

REF=$MT_ROOT/tests/reference
CACHE=$REF/.cache

normalize() {
	grep -v '^!missing$' | sed 's/ | \( | \)*/ | /g; s/^ | //; s/ | $//; s/^ | $//'
}

setup_file() {
	"$REF/fetch.sh"
	cd "$BATS_FILE_TMPDIR"
	python3 "$REF/make-hard-corpus.py" > hard.jsonl
	# the corpus as the normalizer leaves it (lone surrogates first to U+FFFD, as mt does)
	for form in NFC NFKC; do
		python3 "$REF/unicode9-normalize.py" $form < hard.jsonl > hard.$form.jsonl
	done
}

setup() {
	F=$BATS_FILE_TMPDIR
	cd "$BATS_TEST_TMPDIR"
}

hf_json() { # hf_json OPTIONS... > tokenizer.json
	python3 "$REF/make-hf-tokenizer.py" "$CACHE/gpt2-vocab.json" "$CACHE/gpt2-merges.txt" "$@"
}

tok() { # tok FILE.json: mt-tokenize the hard corpus with it, ids to got.ids
	mt-tokenize -q --input "$F/hard.jsonl" --output-prefix o --tokenizer-type HuggingFaceTokenizer \
		--tokenizer-model "$1" --skip-bad-lines 2>/dev/null
	idx-dump o_text_document > got.ids
}

same_ids() {
	diff "$1" "$2" > ids.diff || { echo "ids differ ($1 vs $2):"; head -n 10 ids.diff | cut -c1-300; return 1; }
}

@test "TemplateProcessing as Llama 3's file has it: BOS before every string's ids" {
	hf_json --bos '<|endoftext|>' > t.json
	tok t.json
	node "$REF/ref-encode.js" gpt2 --special --bos 50256 < "$F/hard.jsonl" | normalize > want.ids
	same_ids want.ids got.ids
	# and without a template nothing is added: the same ids less the BOS
	hf_json > plain.json
	tok plain.json
	node "$REF/ref-encode.js" gpt2 --special < "$F/hard.jsonl" | normalize > want0.ids
	same_ids want0.ids got.ids
	! cmp -s want.ids want0.ids
}

@test "TemplateProcessing with BOS and EOS; an empty string is [BOS, EOS]" {
	hf_json --bos '<|endoftext|>' --eos '<|endoftext|>' > t.json
	printf '%s\n' '{"text": "Hello"}' '{"text": ""}' '{"text": ["a", "b"]}' > in.jsonl
	mt-tokenize -q --input in.jsonl --output-prefix o --tokenizer-type HuggingFaceTokenizer --tokenizer-model t.json
	run -0 idx-dump o_text_document
	[ "${lines[0]}" = "50256 15496 50256" ]
	[ "${lines[1]}" = "50256 50256" ]
	[ "${lines[2]}" = "50256 64 50256 | 50256 65 50256" ]
}

@test "BertProcessing and RobertaProcessing: [cls] text [sep]" {
	for kind in BertProcessing RobertaProcessing; do
		hf_json | python3 -c '
import json, sys
t = json.load(sys.stdin)
t["post_processor"] = {"type": sys.argv[1], "cls": ["<|endoftext|>", 50256], "sep": ["!", 0]}
print(json.dumps(t))' $kind > b.json
		echo '{"text": "Hello"}' > in.jsonl
		mt-tokenize -q --input in.jsonl --output-prefix o --tokenizer-type HuggingFaceTokenizer --tokenizer-model b.json
		[ "$(idx-dump o_text_document)" = "50256 15496 0" ]
	done
}

@test "normalizers NFC and NFKC: ids of the normalized text (Unicode 9.0's tables), on the hard corpus" {
	for form in NFC NFKC; do
		hf_json --normalizer $form --bos '<|endoftext|>' > n.json
		tok n.json
		node "$REF/ref-encode.js" gpt2 --special --bos 50256 < "$F/hard.$form.jsonl" | normalize > want.ids
		same_ids want.ids got.ids
	done
	# the normalizer changed something on this corpus
	! cmp -s "$F/hard.jsonl" "$F/hard.NFKC.jsonl"
}

@test "normalizers with Unicode 9.0's tables, as Hugging Face's: later code points kept, as starters" {
	# the cases and the sweep of tests/reference/unicode-sweep.py
	python3 "$REF/unicode-sweep.py" > in.jsonl
	hf_json --normalizer NFC > NFC.json
	for form in NFC NFD NFKC NFKD; do
		sed 's/"normalizer": {"type": "NFC"}/"normalizer": {"type": "'$form'"}/' NFC.json > n.json
		grep -q '"normalizer": {"type": "'$form'"}' n.json
		mt-tokenize -q --input in.jsonl --output-prefix o --tokenizer-type HuggingFaceTokenizer --tokenizer-model n.json
		idx-dump o_text_document > got.$form.ids
	done
	# mt's ids back to text through GPT-2's byte alphabet (the BPE is byte-level and lossless),
	# line by line against the reference; and the rule matters on these texts: Python's own
	# (later) tables give other text in some lines
	python3 -c '
import json, sys, unicodedata
sys.path.insert(0, sys.argv[2])
normalize9 = __import__("unicode9-normalize").normalize9
vocab = json.load(open(sys.argv[1], encoding="utf-8"))
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte = {chr(c): b for b, c in zip(bs, cs)}
piece = {i: bytes(byte[ch] for ch in t) for t, i in vocab.items()}
inputs = [json.loads(l)["text"] for l in open("in.jsonl", encoding="utf-8")]
bad = 0
for form in ("NFC", "NFD", "NFKC", "NFKD"):
    want = [normalize9(form, t) for t in inputs]
    got = [b"".join(piece[int(i)] for i in l.split()).decode("utf-8") for l in open(f"got.{form}.ids")]
    assert len(want) == len(got) == len(inputs), (form, len(want), len(got))
    for k, (w, g) in enumerate(zip(want, got)):
        if w != g:
            bad += 1
            if bad <= 5:
                i = next(j for j in range(len(w)) if j >= len(g) or w[j] != g[j])
                print(f"{form} line {k + 1} at {i}: want {ascii(w[i:i + 8])}, mt {ascii(g[i:i + 8])}")
    changed = sum(unicodedata.normalize(form, t) != w for t, w in zip(inputs, want))
    print(f"{form}: {len(want)} lines, {changed} differ from unicodedata {unicodedata.unidata_version}")
    if changed < 6:
        bad += 1
sys.exit(1 if bad else 0)' "$CACHE/gpt2-vocab.json" "$REF"
	# the cases by hand: U+32FF kept, U+337B and ﬁ changed; marks kept on their side of U+1DFA
	python3 "$REF/unicode9-normalize.py" NFKC < in.jsonl > want.jsonl
	run -0 python3 -c 'import json, sys; print(*[json.loads(l)["text"] for l in sys.stdin][:3], sep="\n")' < want.jsonl
	[ "${lines[0]}" = $'\u5e73\u6210\u32ff'fi ]
	[ "${lines[1]}" = $'\u32ff' ]
	[ "${lines[2]}" = $'\u00e9\u1dfa\u0323' ]
}

@test "lib/text/unicode_post9.h is what scripts/gen-unicode-post9.py makes of the installed unicode-data" {
	[ -r /usr/share/unicode/DerivedAge.txt ] || skip "no /usr/share/unicode (apt-get install unicode-data)"
	python3 "$MT_ROOT/scripts/gen-unicode-post9.py" > post9.h
	diff "$MT_ROOT/lib/text/unicode_post9.h" post9.h
}

@test "Sequence of Prepend and Replace (literal) normalizers" {
	hf_json | python3 -c '
import json, sys
t = json.load(sys.stdin)
t["normalizer"] = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "Q"}, {"type": "Replace", "pattern": {"String": "b"}, "content": "xy"}]}
print(json.dumps(t))' > p.json
	printf '%s\n' '{"text": "abcb"}' '{"text": ""}' > in.jsonl
	mt-tokenize -q --input in.jsonl --output-prefix o --tokenizer-type HuggingFaceTokenizer --tokenizer-model p.json
	# Qaxycxy by tiktoken's gpt2; the empty text stays empty (Prepend skips it)
	want=$(echo '{"text": "Qaxycxy"}' | node "$REF/ref-encode.js" gpt2)
	run -0 idx-dump o_text_document
	[ "${lines[0]}" = "$want" ]
	[ "${lines[1]}" = "" ]
}

@test "unsupported components: exit 3, the component and the file named" {
	echo '{"text": "x"}' > in.jsonl
	check() { # JSON-EDIT EXPECTED-MESSAGE-PART
		hf_json | python3 -c "
import json, sys
t = json.load(sys.stdin)
$1
print(json.dumps(t))" > bad.json
		run -3 --separate-stderr mt-tokenize --input in.jsonl --output-prefix o --tokenizer-type HuggingFaceTokenizer \
			--tokenizer-model bad.json
		[[ $stderr == *"tokenizer 'bad.json'"*"$2"* ]] || { echo "stderr: $stderr"; return 1; }
		[ ! -e o_text_document.bin ]
	}
	check 't["normalizer"] = {"type": "BertNormalizer"}' "unsupported normalizer 'BertNormalizer'"
	check 't["normalizer"] = {"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}' "unsupported normalizer Replace"
	check 't["post_processor"] = {"type": "Whatever"}' "unsupported post-processor 'Whatever'"
	check 't["pre_tokenizer"] = {"type": "Metaspace", "replacement": "_"}' "unsupported pre-tokenizer 'Metaspace'"
	check 't["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}]}' \
		"unsupported pre-tokenizer 'Digits'"
	check 't["model"]["type"] = "WordPiece"' "model type 'WordPiece' is not supported"
	check 't["model"]["byte_fallback"] = True' "Llama2Tokenizer"
	check 't["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<nope>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}}' \
		"post-processor token '<nope>' is not in the vocabulary"
}
