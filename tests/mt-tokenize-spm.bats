#!/usr/bin/env bats
# SentencePiece tokenizers (Megatron's SentencePieceTokenizer, GPTSentencePieceTokenizer,
# Llama2Tokenizer) against Python's sentencepiece library (Debian's python3-sentencepiece)
# wrapped as Megatron's tokenizer.py wraps it (tests/reference/spm-encode.py): ids on the
# hard-case corpus, special texts, BOS and EOD, decode, workers; then the same tokenizer
# through mt-train, mt-generate, mt-eval and the HF export. The models are trained in
# setup_file by the library's own trainer (tests/reference/make-spm-model.py), seeded.
load helpers
cpu_only
export OMP_NUM_THREADS=1

REF=$MT_ROOT/tests/reference
TYPES="SentencePieceTokenizer GPTSentencePieceTokenizer Llama2Tokenizer"

# ref-encode.js lines as Megatron writes documents (as in mt-tokenize.bats)
normalize() {
	grep -v '^!missing$' | sed 's/ | \( | \)*/ | /g; s/^ | //; s/ | $//; s/^ | $//'
}

spm_python() {
	/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null ||
		skip "/usr/bin/python3 lacks sentencepiece (scripts/install-deps.sh installs python3-sentencepiece)"
}

setup_file() {
	cd "$BATS_FILE_TMPDIR"
	/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null || return 0
	python3 "$REF/make-hard-corpus.py" > hard.jsonl
	/usr/bin/python3 "$REF/make-spm-model.py" llama hard.jsonl llama
	/usr/bin/python3 "$REF/make-spm-model.py" unigram hard.jsonl unigram
	for m in llama unigram; do
		for t in $TYPES; do
			/usr/bin/python3 "$REF/spm-encode.py" $t $m.model < hard.jsonl 2> $m.$t.meta | normalize > $m.$t.ids
		done
	done
}

setup() {
	spm_python
	F=$BATS_FILE_TMPDIR
	cd "$BATS_TEST_TMPDIR"
}

same_ids() {
	diff "$1" "$2" > ids.diff || { echo "ids differ ($1 vs $2):"; head -n 10 ids.diff | cut -c1-300; return 1; }
}

@test "ids equal Python sentencepiece's, as Megatron's three classes give them, on the hard corpus (two models)" {
	[ "$(stat -c %s "$F/hard.jsonl")" -ge 1000000 ]
	for m in llama unigram; do
		for t in $TYPES; do
			run -0 --separate-stderr mt-tokenize --input "$F/hard.jsonl" --output-prefix out --tokenizer-type $t \
				--tokenizer-model "$F/$m.model" --skip-bad-lines --workers 2
			[ -z "$output" ]
			idx-dump out_text_document > got.ids
			same_ids "$F/$m.$t.ids" got.ids
		done
	done
	# the comparison can fail: GPTSentencePieceTokenizer's ids are not Llama2Tokenizer's
	! cmp -s "$F/llama.GPTSentencePieceTokenizer.ids" "$F/llama.Llama2Tokenizer.ids"
}

@test "special texts: SentencePieceTokenizer's become their ids, Llama2Tokenizer puts BOS before every sentence, even an empty one" {
	cat > special.jsonl <<-'EOF'
	{"text": "a<EOD>b<CLS><SEP> <MASK>x"}
	{"text": "<<EOD>> <s>and</s> <pad><PAD><unk> <|user|>!"}
	{"text": ["one <EOD>", "", "two"]}
	{"text": ""}
	{"text": "<EOD"}
	EOF
	for m in llama unigram; do
		for t in $TYPES; do
			/usr/bin/python3 "$REF/spm-encode.py" $t "$F/$m.model" < special.jsonl 2>/dev/null | normalize > want.ids
			mt-tokenize -q --input special.jsonl --output-prefix out --tokenizer-type $t --tokenizer-model "$F/$m.model"
			idx-dump out_text_document > got.ids
			same_ids want.ids got.ids
		done
	done
	# by hand, for the llama model: <EOD> is the third id after the model's 1500 pieces
	mt-tokenize -q --input special.jsonl --output-prefix s --tokenizer-type SentencePieceTokenizer \
		--tokenizer-model "$F/llama.model"
	[[ $(idx-dump s_text_document | head -1) == *" 1502 "*" 1500 1501 "* ]]
	mt-tokenize -q --input special.jsonl --output-prefix l --tokenizer-type Llama2Tokenizer \
		--tokenizer-model "$F/llama.model"
	run idx-dump l_text_document
	[[ ${lines[2]} == "1 "*" | 1 | 1 "* ]]
	[ "${lines[3]}" = 1 ]
}

@test "--append-eod: <EOD> for SentencePieceTokenizer, the model's eos for the others; vocab sizes as Megatron's" {
	for t in $TYPES; do
		read -r vocab eod < "$F/llama.$t.meta"
		mt-tokenize -q --input "$F/hard.jsonl" --output-prefix e --tokenizer-type $t --tokenizer-model "$F/llama.model" \
			--skip-bad-lines --append-eod 2>/dev/null
		idx-dump e_text_document > got.ids
		sed "/./s/\$/ $eod/" "$F/llama.$t.ids" > want.ids
		same_ids want.ids got.ids
		case $t in
		SentencePieceTokenizer) [ "$vocab $eod" = "1505 1502" ] ;;
		*) [ "$vocab $eod" = "1500 2" ] ;;
		esac
		# mt-train's vocabulary is the tokenizer's, padded as Megatron pads it
		run -0 --separate-stderr mt-train --dry-run --config "$MT_ROOT/share/configs/tiny.conf" --mock-data \
			--tokenizer-type $t --tokenizer-model "$F/llama.model" --micro-batch-size 1 --train-iters 1 --lr 1e-3
		[[ $output$stderr == *"vocab $vocab (padded"* ]]
	done
	read -r vocab eod < "$F/unigram.SentencePieceTokenizer.meta"
	[ "$vocab $eod" = "1004 1002" ] # the model has <pad>: only <CLS> <SEP> <EOD> <MASK> are added
}

@test "output bytes do not depend on --workers" {
	for w in 1 3; do
		mt-tokenize -q --input "$F/hard.jsonl" --output-prefix w$w --tokenizer-type SentencePieceTokenizer \
			--tokenizer-model "$F/llama.model" --skip-bad-lines --workers $w 2>/dev/null
	done
	cmp w1_text_document.bin w3_text_document.bin
	cmp w1_text_document.idx w3_text_document.idx
}

@test "decode gives Megatron's detokenize of the ids: the library's text, special ids between spaces" {
	# the hard corpus's string documents of valid UTF-8
	/usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    t = json.loads(line).get("text")
    if isinstance(t, str):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            continue
        sys.stdout.write(line)' < "$F/hard.jsonl" > clean.jsonl
	printf '%s\n' '{"text": "x <EOD> y<s>z"}' >> clean.jsonl
	for m in llama unigram; do
		for t in $TYPES; do
			/usr/bin/python3 "$REF/spm-encode.py" $t "$F/$m.model" --decode < clean.jsonl > want.txt 2>/dev/null
			mt-tokenize -q --input clean.jsonl --output-prefix d --tokenizer-type $t --tokenizer-model "$F/$m.model"
			mt-tokenize decode --tokenizer-type $t --tokenizer-model "$F/$m.model" --dataset d_text_document > got.txt
			cmp want.txt got.txt
		done
	done
	run -0 mt-tokenize decode --tokenizer-type SentencePieceTokenizer --tokenizer-model "$F/llama.model" 1502
	[ "$output" = " <EOD> " ]
	run -3 --separate-stderr mt-tokenize decode --tokenizer-type Llama2Tokenizer --tokenizer-model "$F/llama.model" 1500
	[ "$stderr" = "mt-tokenize: error: token id 1500 is not in the vocabulary" ]
}

@test "errors: no --tokenizer-model is exit 2, a missing file 4, a file that is not a model 3, each named" {
	echo '{"text": "x"}' > in.jsonl
	run -2 --separate-stderr mt-tokenize --input in.jsonl --output-prefix o --tokenizer-type Llama2Tokenizer
	[[ $stderr == *"Llama2Tokenizer needs --tokenizer-model"* ]]
	run -4 --separate-stderr mt-tokenize --input in.jsonl --output-prefix o --tokenizer-type Llama2Tokenizer \
		--tokenizer-model nothere.model
	[[ $stderr == *"cannot read tokenizer model 'nothere.model'"* ]]
	run -3 --separate-stderr mt-tokenize --input in.jsonl --output-prefix o --tokenizer-type GPTSentencePieceTokenizer \
		--tokenizer-model in.jsonl
	[[ $stderr == *"tokenizer model 'in.jsonl': not a SentencePiece model"* ]]
	[ ! -e o_text_document.bin ]
	run -2 --separate-stderr mt-tokenize --input in.jsonl --output-prefix o --tokenizer-type Llama3Tokenizer
	[[ $stderr == *"unknown --tokenizer-type 'Llama3Tokenizer'"*"Llama2Tokenizer"* ]]
}

@test "mt-train, mt-generate, mt-eval and the HF export read the tokenizer recorded in the checkpoint" {
	python3 "$MT_ROOT/share/demo/make-corpus.py" --docs 300 > demo.jsonl
	TOK=(--tokenizer-type Llama2Tokenizer --tokenizer-model "$F/llama.model")
	mt-tokenize -q --input demo.jsonl --output-prefix d "${TOK[@]}" --append-eod
	mt-train -q --config "$MT_ROOT/share/configs/llama-tiny.conf" --data-path d_text_document "${TOK[@]}" \
		--split 100,0,0 --data-cache-path cache --micro-batch-size 4 --global-batch-size 4 --train-iters 10 \
		--lr 5e-3 --save ck
	# the prompt's ids are Megatron's tokenize(): BOS first
	want=$(echo '{"text": "Once upon a time"}' |
		/usr/bin/python3 "$REF/spm-encode.py" Llama2Tokenizer "$F/llama.model" 2>/dev/null | tr ' ' ,)
	run -0 --separate-stderr mt-generate -q --load ck --temperature 0 --max-tokens 4 --json "Once upon a time"
	[[ $output == *"\"prompt_tokens\":[$want]"* ]]
	[[ $want == 1,* ]]
	head -3 demo.jsonl > lambada.jsonl
	run -0 --separate-stderr mt-eval -q --load ck --lambada lambada.jsonl --json
	[[ $output == *'"task":"lambada"'* ]]
	run -0 --separate-stderr mt-ckpt-reshard export --format hf-llama ck hf
	[[ $stderr == *"with the SentencePiece tokenizer.model"* ]]
	cmp hf/tokenizer.model "$F/llama.model"
	run -0 /usr/bin/python3 -c '
import json
t = json.load(open("hf/tokenizer_config.json")); c = json.load(open("hf/config.json"))
print(t["tokenizer_class"], t["add_bos_token"], t["bos_token"], t["eos_token"], c["bos_token_id"], c["eos_token_id"])'
	[ "$output" = "LlamaTokenizer True <s> </s> 1 2" ]
	# imported back, the checkpoint records Llama2Tokenizer with its copy of the model
	mt-generate -q --load ck --temperature 0 --max-tokens 4 --json "Once upon a time" > before.json
	mt-ckpt-reshard import --format hf-llama hf ck2 2>/dev/null
	cmp ck2/tokenizer/tokenizer.model "$F/llama.model"
	mt-generate -q --load ck2 --temperature 0 --max-tokens 4 --json "Once upon a time" > after.json
	cmp before.json after.json
}
