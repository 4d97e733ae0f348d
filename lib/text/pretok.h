/* pretok.h: pre-tokenization, the regex that cuts text into pieces before BPE.
 *
 * Patterns are compiled with PCRE2 (UTF, Unicode properties, JIT). Named patterns are
 * those of GPT-2, cl100k_base and o200k_base; any other string is taken as a regex in
 * the dialect tiktoken and Hugging Face use. Rewrites make PCRE2 agree with those Rust
 * engines: \s, \S and the General_Category sets (\p{L}, \p{N}, \p{Lu}, ...) are spelled
 * out from Unicode 16.0 tables (PCRE2's are older, and its \s also takes U+180E), and
 * $ means only the end of the text. The compiled pattern is shared; each
 * thread matches with its own struct mt_pretok_iter. Text must be valid UTF-8. */
#ifndef MT_PRETOK_H
#define MT_PRETOK_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>

#include "base/err.h"

struct mt_pretok {
	pcre2_code *re;
	char *source;   /* the pattern as compiled, after the rewrites */
	int keep_gaps;  /* text between matches becomes pieces too (Hugging Face's Split) */
};

int mt_pretok_compile(struct mt_pretok *p, const char *name_or_regex, struct mt_err *err);
void mt_pretok_free(struct mt_pretok *p);
/* The regex behind a name ("gpt2", "cl100k", "o200k"), or NULL. */
const char *mt_pretok_named(const char *name);

struct mt_pretok_iter {
	const struct mt_pretok *p;
	pcre2_match_data *md;
	pcre2_match_context *mc;
	pcre2_jit_stack *stack;
	const char *s;
	size_t n, pos;
	size_t next_start, next_end; /* a match found while a gap before it was returned */
	int pending;
};

int mt_pretok_iter_init(struct mt_pretok_iter *it, const struct mt_pretok *p, struct mt_err *err);
void mt_pretok_iter_free(struct mt_pretok_iter *it);
void mt_pretok_iter_reset(struct mt_pretok_iter *it, const char *s, size_t n);
/* Next piece [*b, *e): 1, or 0 at the end. */
int mt_pretok_iter_next(struct mt_pretok_iter *it, size_t *b, size_t *e);

#endif
