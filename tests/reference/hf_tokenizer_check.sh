#!/usr/bin/env bash
# Where Hugging Face's tokenizers library is installed (the GPU machine's Python; it is not
# in Debian, so CI's tests/mt-tokenize-hfjson.bats checks the same files against tiktoken):
# the tokenizer.json files those tests read, made by make-hf-tokenizer.py from GPT-2's
# vocabulary (plain, a TemplateProcessing BOS, BOS and EOS, the NFC and NFKC normalizers,
# Llama 3's Split pre-tokenizer), encode the hard corpus to the same ids in mt-tokenize and
# in tokenizers' Tokenizer.encode(add_special_tokens=True). One line per file, then
# "N of N files identical"; exit 1 on a difference.
#   tests/reference/hf_tokenizer_check.sh GPT2_FILES_DIR    env: PY (the Python with tokenizers)
set -euo pipefail
cd "$(dirname "$0")/../.."
G=${1:?the folder with gpt2-vocab.json and gpt2-merges.txt}
PY=${PY:-python3}
REF=tests/reference
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 "$REF/make-hard-corpus.py" > "$W/hard.jsonl"
"$PY" -c 'import tokenizers; print("# tokenizers", tokenizers.__version__)'
LLAMA3='(?i:'"'"'s|'"'"'t|'"'"'re|'"'"'ve|'"'"'m|'"'"'ll|'"'"'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+'
names=(plain bos bos-eos nfc nfkc split)
opts=("" "--bos <|endoftext|>" "--bos <|endoftext|> --eos <|endoftext|>" "--normalizer NFC" "--normalizer NFKC" "--split")
same=0
for i in "${!names[@]}"; do
	n=${names[$i]}
	if [ "$n" = split ]; then
		python3 "$REF/make-hf-tokenizer.py" "$G/gpt2-vocab.json" "$G/gpt2-merges.txt" --split "$LLAMA3" > "$W/$n.json"
	else
		# shellcheck disable=SC2086
		python3 "$REF/make-hf-tokenizer.py" "$G/gpt2-vocab.json" "$G/gpt2-merges.txt" ${opts[$i]} > "$W/$n.json"
	fi
	build/bin/mt-tokenize -q --input "$W/hard.jsonl" --output-prefix "$W/o" --tokenizer-type HuggingFaceTokenizer \
		--tokenizer-model "$W/$n.json" --skip-bad-lines 2>/dev/null
	build/tests/idx-dump "$W/o_text_document" > "$W/got"
	"$PY" "$REF/ref-encode.py" hf "$W/$n.json" < "$W/hard.jsonl" |
		grep -v '^!missing$' | sed 's/ | \( | \)*/ | /g; s/^ | //; s/ | $//; s/^ | $//' > "$W/want"
	if cmp -s "$W/want" "$W/got"; then
		echo "$n: identical ($(wc -l < "$W/got") documents)"
		same=$((same + 1))
	else
		echo "$n: DIFFERENT in $(diff "$W/want" "$W/got" | grep -c "^<" || true) documents (lines $(diff "$W/want" "$W/got" | grep -v "^[<>-]" | tr "\n" " " || true))"
	fi
done
echo "$same of ${#names[@]} files identical"
[ "$same" -eq "${#names[@]}" ]
