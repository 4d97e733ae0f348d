#!/usr/bin/env bats
# tokenizer.json beyond the model: normalizers and post-processor templates, and a clear
# error for each component mt does not read. Hugging Face's tokenizers library is not in
# Debian, so the references are the format's documented semantics on top of tiktoken:
#   - the files are GPT-2's vocabulary written as tokenizer.json by
#     tests/reference/make-hf-tokenizer.py (byte-level BPE, <|endoftext|> an added token);
#   - the expected ids are tiktoken's gpt2 (npm, tests/reference/ref-encode.js) with
#     special tokens allowed (an added token in the text is matched, as Hugging Face does)
#     on the text after the normalizer, as Python's unicodedata.normalize gives it (the
#     hard corpus holds only Unicode 14 characters, which Python 3.11 and utf8proc agree on),
#     with the template's ids around each string (TemplateProcessing "single": [BOS] $A [EOS]).
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
		python3 -c '
import json, sys, unicodedata
form = sys.argv[1]
def norm(s):
    return unicodedata.normalize(form, s.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
for line in sys.stdin:
    d = json.loads(line)
    t = d.get("text")
    if isinstance(t, str):
        d["text"] = norm(t)
    elif isinstance(t, list):
        d["text"] = [norm(x) if isinstance(x, str) else x for x in t]
    print(json.dumps(d))' $form < hard.jsonl > hard.$form.jsonl
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

@test "normalizers NFC and NFKC: ids of the normalized text (Python's unicodedata), on the hard corpus" {
	for form in NFC NFKC; do
		hf_json --normalizer $form --bos '<|endoftext|>' > n.json
		tok n.json
		node "$REF/ref-encode.js" gpt2 --special --bos 50256 < "$F/hard.$form.jsonl" | normalize > want.ids
		same_ids want.ids got.ids
	done
	# the normalizer changed something on this corpus
	! cmp -s "$F/hard.jsonl" "$F/hard.NFKC.jsonl"
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
