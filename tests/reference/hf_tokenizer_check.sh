#!/usr/bin/env bash
# Where Hugging Face's tokenizers library is installed (the GPU machine's Python; it is not
# in Debian, so CI's tests/mt-tokenize-hfjson.bats checks the same files against tiktoken):
# the tokenizer.json files those tests read, made by make-hf-tokenizer.py from GPT-2's
# vocabulary (plain, a TemplateProcessing BOS, BOS and EOS, the NFC, NFD, NFKC and NFKD
# normalizers, Llama 3's Split pre-tokenizer), encode the hard corpus and the Unicode sweep of
# unicode-sweep.py to the same ids in mt-tokenize and in tokenizers'
# Tokenizer.encode(add_special_tokens=True). One line per file and corpus, then "N of N
# identical"; exit 1 on a difference. First, tokenizers' own normalizers against
# unicode9-normalize.py (the rule mt follows) on the sweep's texts.
#   tests/reference/hf_tokenizer_check.sh GPT2_FILES_DIR
#   env: PY (the Python with tokenizers), UNICODE_DATA (the folder with DerivedAge.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
G=${1:?the folder with gpt2-vocab.json and gpt2-merges.txt}
PY=${PY:-python3}
REF=tests/reference
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 "$REF/make-hard-corpus.py" > "$W/hard.jsonl"
"$PY" "$REF/unicode-sweep.py" > "$W/sweep.jsonl"
"$PY" -c 'import tokenizers; print("# tokenizers", tokenizers.__version__)'
"$PY" -c '
import json, sys, unicodedata
from tokenizers import normalizers
sys.path.insert(0, sys.argv[1])
normalize9 = __import__("unicode9-normalize").normalize9
texts = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
texts += [chr(c) for c in range(0x110000) if not 0xd800 <= c < 0xe000]
bad = 0
for form in ("NFC", "NFD", "NFKC", "NFKD"):
    n = getattr(normalizers, form)()
    diff = [t for t in texts if n.normalize_str(t) != normalize9(form, t)]
    plain = sum(n.normalize_str(t) != unicodedata.normalize(form, t) for t in texts)
    print(f"normalizer {form}: tokenizers and unicode9-normalize.py differ on {len(diff)} of {len(texts)} texts"
          f" (tokenizers and unicodedata {unicodedata.unidata_version}: {plain})")
    for t in diff[:3]:
        print("  ", ascii(t[:40]), ascii(n.normalize_str(t)[:40]), ascii(normalize9(form, t)[:40]))
    bad += len(diff)
sys.exit(1 if bad else 0)' "$REF" "$W/sweep.jsonl" || fail=1
LLAMA3='(?i:'"'"'s|'"'"'t|'"'"'re|'"'"'ve|'"'"'m|'"'"'ll|'"'"'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+'
names=(plain bos bos-eos nfc nfd nfkc nfkd split)
opts=("" "--bos <|endoftext|>" "--bos <|endoftext|> --eos <|endoftext|>" "--normalizer NFC" "--normalizer NFD"
	"--normalizer NFKC" "--normalizer NFKD" "--split")
same=0 total=0 fail=${fail:-0}
for i in "${!names[@]}"; do
	n=${names[$i]}
	if [ "$n" = split ]; then
		python3 "$REF/make-hf-tokenizer.py" "$G/gpt2-vocab.json" "$G/gpt2-merges.txt" --split "$LLAMA3" > "$W/$n.json"
	else
		# shellcheck disable=SC2086
		python3 "$REF/make-hf-tokenizer.py" "$G/gpt2-vocab.json" "$G/gpt2-merges.txt" ${opts[$i]} > "$W/$n.json"
	fi
	for corpus in hard sweep; do
		build/bin/mt-tokenize -q --input "$W/$corpus.jsonl" --output-prefix "$W/o" --tokenizer-type HuggingFaceTokenizer \
			--tokenizer-model "$W/$n.json" --skip-bad-lines 2>/dev/null
		build/tests/idx-dump "$W/o_text_document" > "$W/got"
		"$PY" "$REF/ref-encode.py" hf "$W/$n.json" < "$W/$corpus.jsonl" |
			grep -v '^!missing$' | sed 's/ | \( | \)*/ | /g; s/^ | //; s/ | $//; s/^ | $//' > "$W/want"
		total=$((total + 1))
		if cmp -s "$W/want" "$W/got"; then
			echo "$n, $corpus: identical ($(wc -l < "$W/got") documents)"
			same=$((same + 1))
		else
			echo "$n, $corpus: DIFFERENT in $(diff "$W/want" "$W/got" | grep -c "^<" || true) documents (lines $(diff "$W/want" "$W/got" | grep -v "^[<>-]" | tr "\n" " " || true))"
		fi
	done
done
echo "$same of $total identical"
[ "$same" -eq "$total" ] && [ "$fail" -eq 0 ]
