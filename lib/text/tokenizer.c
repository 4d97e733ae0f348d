/* tokenizer.c: Megatron's tokenizer flags to a loaded tokenizer (see tokenizer.h). */
#include "text/tokenizer.h"

#include <string.h>

#include "text/hfjson.h"
#include "text/spm.h"

#define TYPES "GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, " \
	"GPTSentencePieceTokenizer, Llama2Tokenizer or NullTokenizer"

int mt_tokenizer_load(struct mt_tokenizer *t, const struct mt_tokenizer_args *a, struct mt_err *err)
{
	const char *pattern;

	memset(t, 0, sizeof(*t));
	if (!a->type)
		return mt_err_set(err, MT_EXIT_USAGE, "--tokenizer-type is required (" TYPES ")");
	if (strcmp(a->type, "GPT2BPETokenizer") == 0) {
		if (!a->vocab_file || !a->merge_file)
			return mt_err_set(err, MT_EXIT_USAGE, "GPT2BPETokenizer needs --vocab-file and --merge-file");
		if (mt_vocab_load_gpt2(&t->vocab, a->vocab_file, a->merge_file, err))
			return -1;
	} else if (strcmp(a->type, "TikTokenizer") == 0) {
		if (!a->tokenizer_model)
			return mt_err_set(err, MT_EXIT_USAGE, "TikTokenizer needs --tokenizer-model (a .tiktoken rank file)");
		if (mt_vocab_load_tiktoken(&t->vocab, a->tokenizer_model, err))
			return -1;
	} else if (strcmp(a->type, "HuggingFaceTokenizer") == 0) {
		if (!a->tokenizer_model)
			return mt_err_set(err, MT_EXIT_USAGE, "HuggingFaceTokenizer needs --tokenizer-model (a tokenizer.json)");
		if (mt_vocab_load_hf(&t->vocab, a->tokenizer_model, &mt_hfjson_ops, err))
			return -1;
	} else if (mt_spm_type_parse(a->type)) {
		if (!a->tokenizer_model)
			return mt_err_set(err, MT_EXIT_USAGE, "%s needs --tokenizer-model (a SentencePiece tokenizer.model)",
					  a->type);
		/* SentencePiece splits text itself: no pre-tokenization pattern */
		return mt_spm_load(&t->vocab, a->tokenizer_model, mt_spm_type_parse(a->type), err);
	} else if (strcmp(a->type, "NullTokenizer") == 0) {
		if (a->vocab_size <= 0)
			return mt_err_set(err, MT_EXIT_USAGE, "NullTokenizer needs --vocab-size");
		return mt_vocab_init_null(&t->vocab, a->vocab_size, err);
	} else {
		return mt_err_set(err, MT_EXIT_USAGE, "unknown --tokenizer-type '%s' (" TYPES ")", a->type);
	}
	pattern = a->pattern ? a->pattern : t->vocab.pattern;
	if (!pattern) {
		mt_vocab_free(&t->vocab);
		return mt_err_set(err, MT_EXIT_USAGE, "no pre-tokenization pattern is known for '%s': "
				  "give --tiktoken-pattern (gpt2, cl100k, o200k or a regex)", a->tokenizer_model);
	}
	if (mt_pretok_compile(&t->pretok, pattern, err)) {
		mt_vocab_free(&t->vocab);
		return -1;
	}
	/* Hugging Face's Split keeps the text between matches; tiktoken's find_iter drops it */
	t->pretok.keep_gaps = t->vocab.kind == MT_VOCAB_HF;
	t->has_pretok = 1;
	return 0;
}

void mt_tokenizer_free(struct mt_tokenizer *t)
{
	if (t->has_pretok)
		mt_pretok_free(&t->pretok);
	mt_vocab_free(&t->vocab);
	memset(t, 0, sizeof(*t));
}
