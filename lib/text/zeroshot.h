/* zeroshot.h: how Megatron's zero-shot tasks turn text into scored token windows
 * (tasks/zeroshot_gpt; docs/mt-eval.md and the spec's section 7 give the rules).
 *
 * WikiText-style perplexity: the whole text is one token stream, cut into windows of
 * seq_length+1 tokens that start every `stride` tokens and are padded with the
 * end-of-document id; the first window counts all its targets, every later one only its
 * last `stride` targets (none past the end), so each target of the text counts once.
 * The word count for the token-to-word adjustment is Python's len(text.strip().split(" ")).
 *
 * LAMBADA-style cloze: the last word of each text is the answer. Non-strict: the last
 * token of the tokenized text; strict: the last whitespace-separated word, tokenized
 * with a leading space, after the text before it (stripped). A row is the context then
 * the answer, padded with the end-of-document id; only the answer's positions count.
 *
 * This file does the cutting and counting only: no tokenizer, no model (lmeval.c
 * scores the rows). */
#ifndef MT_ZEROSHOT_H
#define MT_ZEROSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Python's str.isspace() for the code point starting at s (n bytes left): its length in
 * bytes when it is whitespace, else 0. */
size_t mt_zs_space_at(const char *s, size_t n);
/* The same for the code point ending at s + n: its length when whitespace, else 0. */
size_t mt_zs_space_before(const char *s, size_t n);
/* Python's text.strip(): *beg and *len of what is left. */
void mt_zs_strip(const char *s, size_t n, size_t *beg, size_t *len);

/* len(text.strip().split(" ")): Megatron's count of original (whitespace) tokens. */
int64_t mt_zs_word_count(const char *text, size_t n);

/* Number of windows: max(ceil(max(ntok - 1 - stride, 0) / stride) + 1, 1). */
int64_t mt_zs_windows(int64_t ntok, int64_t stride);
/* Window k: row[0..L] = toks[k*stride .. k*stride+L] padded with eod; mask[0..L) marks
 * the counted targets row[1..L]. Returns the number counted. */
int64_t mt_zs_window(const int32_t *toks, int64_t ntok, int64_t L, int64_t stride, int64_t k, int32_t eod,
		     int32_t *row, uint8_t *mask);

/* Strict LAMBADA's split of a text: the context text[:text.rfind(w)].strip() and the
 * last word w of text.split(). -1 when the text has no word. */
int mt_zs_last_word(const char *text, size_t n, size_t *ctx_beg, size_t *ctx_len, size_t *word_beg,
		    size_t *word_len);

/* A cloze row: context then answer, padded with eod to L+1; mask on the answer's
 * positions. A row longer than L+1 loses context tokens from the left (*dropped says how
 * many; Megatron cannot run such a row at all). -1 when the answer alone does not fit
 * or is empty. */
int mt_zs_cloze_row(const int32_t *ctx, int64_t nctx, const int32_t *ans, int64_t nans, int64_t L, int32_t eod,
		    int32_t *row, uint8_t *mask, int64_t *dropped);

#endif
