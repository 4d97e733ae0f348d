/* spm.h: Megatron's SentencePiece tokenizers over a SentencePiece model (spmodel.h).
 *
 * Three of Megatron's --tokenizer-type values read a tokenizer.model; they differ in
 * what they add around the model's own ids:
 *   SentencePieceTokenizer     the model's pieces, then <CLS> <SEP> <EOD> <MASK> and the
 *                              pad/bos/eos pieces (<PAD> <BOS> <EOS> where the model has
 *                              none) appended unless present; these special texts in the
 *                              input become their ids, the text between them is encoded
 *                              piece by piece; end of document is <EOD>;
 *   GPTSentencePieceTokenizer  the model's ids alone; end of document is the model's eos;
 *   Llama2Tokenizer            the model's bos before every encoded text; end of document
 *                              is the model's eos.
 * Decoding is the model's, with SentencePieceTokenizer's special ids written between
 * spaces as Megatron's detokenize writes them. A tokenizer loads into a struct mt_vocab
 * of kind MT_VOCAB_SPM (ids, eod, vocab_size, each id's text for streaming output), so
 * the tools see it as they see the others; bpe.c passes encode and decode through here
 * (through the vocabulary's table, mt_spm_ops). */
#ifndef MT_SPM_H
#define MT_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "text/spmodel.h"
#include "text/vocab.h"

enum mt_spm_type {
	MT_SPM_SENTENCEPIECE = 1, /* Megatron's SentencePieceTokenizer */
	MT_SPM_GPT,               /* GPTSentencePieceTokenizer */
	MT_SPM_LLAMA2,            /* Llama2Tokenizer */
};

struct mt_spm_special {
	char *text;
	size_t len;
	int32_t id;
};

struct mt_spm {
	enum mt_spm_type type;
	struct mt_spmodel *model;
	int32_t npieces;        /* the model's ids are 0..npieces-1 */
	int32_t bos, eos, pad;  /* the model's, -1 where it has none */
	struct mt_spm_special *special; /* SentencePieceTokenizer's, in Megatron's order */
	int nspecial;
};

/* The --tokenizer-type name of a type, and back (0 for an unknown name). */
const char *mt_spm_type_name(enum mt_spm_type t);
enum mt_spm_type mt_spm_type_parse(const char *name);

/* Load model_file as tokenizer type t into v (kind MT_VOCAB_SPM). */
int mt_spm_load(struct mt_vocab *v, const char *model_file, enum mt_spm_type t, struct mt_err *err);
void mt_spm_free(struct mt_spm *s);

/* The table mt_spm_load points the vocabulary at: encode, decode and free go here. */
extern const struct mt_vocab_ops mt_spm_ops;

/* Append the ids of text[0..n) (valid UTF-8) as Megatron's tokenize() gives them. */
int mt_spm_encode(const struct mt_spm *s, const char *text, size_t n, int32_t **ids, size_t *nids,
		  size_t *cap, struct mt_err *err);
/* Append the text of ids as Megatron's detokenize() gives it. */
int mt_spm_decode(const struct mt_spm *s, const int32_t *ids, size_t n, char **buf, size_t *len,
		  size_t *cap, struct mt_err *err);

#endif
