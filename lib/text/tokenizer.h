/* tokenizer.h: choosing and loading a tokenizer the way Megatron's flags name it.
 *
 * Bundles a vocabulary (vocab.h) with its pre-tokenization pattern (pretok.h) so that
 * every tool (mt-tokenize, mt-index cat, mt-eval, mt-generate) loads one from the same
 * flags: --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model,
 * --tiktoken-pattern, --vocab-size. */
#ifndef MT_TOKENIZER_H
#define MT_TOKENIZER_H

#include <stdint.h>

#include "base/err.h"
#include "text/pretok.h"
#include "text/vocab.h"

struct mt_tokenizer_args {
	const char *type;          /* GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer, NullTokenizer,
				    * SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer */
	const char *vocab_file;
	const char *merge_file;
	const char *tokenizer_model;
	const char *pattern;       /* --tiktoken-pattern: a name or a regex; overrides the default */
	int64_t vocab_size;        /* NullTokenizer */
};

struct mt_tokenizer {
	struct mt_vocab vocab;
	struct mt_pretok pretok;
	int has_pretok;
};

int mt_tokenizer_load(struct mt_tokenizer *t, const struct mt_tokenizer_args *a, struct mt_err *err);
void mt_tokenizer_free(struct mt_tokenizer *t);

#endif
