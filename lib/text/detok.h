/* detok.h: the detokenizers Megatron's zero-shot WikiText task applies to a text file
 * before tokenizing it, chosen by a substring of the file's path: "ptb", "wiki" or
 * "lambada" (the first of those, in that order, that the path contains; none: the text
 * as it is).
 *
 *   wikitext: undoes WikiText's tokenization: "s '" -> "s'", " @-@ " -> "-", " @,@ " -> ",",
 *             " @.@ " -> ".", " : " -> ": " (and ; . ! ? ,), spaces inside (), [], {},
 *             "" and '' pairs removed, "= = = =" -> "====" (and = = =, = =), " ° " -> "°",
 *             spaces at line ends and starts removed, " N " -> " 1 ", " 's" -> "'s";
 *   ptb:      " '" -> "'", spaces at line ends and starts removed, " n't" -> "n't",
 *             " N " -> "1 ", "$ 1" -> "$1", "# 1" -> "#1";
 *   lambada:  curly double quotes to straight ones, then "\n" + the stripped text.
 *
 * The rules run in that order, each over the whole text, left to right without
 * overlapping (Python's str.replace and re.sub); the bracket and quote rules are regular
 * expressions with lazy groups, run on PCRE2. The word count for the adjusted perplexity
 * is taken before detokenizing (zeroshot.h). */
#ifndef MT_DETOK_H
#define MT_DETOK_H

#include <stddef.h>

#include "base/err.h"

enum mt_detok { MT_DETOK_NONE, MT_DETOK_WIKITEXT, MT_DETOK_PTB, MT_DETOK_LAMBADA };

extern const char *const mt_detok_names[]; /* "none", "wikitext", "ptb", "lambada" */

/* Megatron's choice for a path. */
enum mt_detok mt_detok_for_path(const char *path);
/* A name from mt_detok_names, else -1. */
int mt_detok_parse(const char *name);

/* Detokenize text[0..n) (UTF-8) into a new malloc'ed, NUL-terminated *out of *outn bytes. */
int mt_detok_apply(enum mt_detok kind, const char *text, size_t n, char **out, size_t *outn, struct mt_err *err);

#endif
