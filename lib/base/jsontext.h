/* jsontext.h: pulling document text out of one JSON-lines record, fast.
 *
 * mt-tokenize's workers need only the string (or list of strings) under a few keys of
 * each line. Building jansson's whole object tree for that cost 15-17% of one worker's
 * time on the hard-case corpus (perf, GPT-2 and cl100k), more than pre-tokenization, so
 * this is a single pass over the line that validates all of it as RFC 8259 JSON (plus
 * what Python's json module, which Megatron uses, also accepts: NaN, Infinity, -Infinity
 * and lone UTF-16 surrogates, which become U+FFFD as tiktoken makes them) and decodes
 * only the strings asked for. Duplicate keys: the last one counts, as in Python and
 * jansson. jsonl.c (jansson) stays the general reader. */
#ifndef MT_JSONTEXT_H
#define MT_JSONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define MT_JSONTEXT_MAX_KEYS 16

enum {
	MT_JSONTEXT_MISSING = -1,  /* the key is not there */
	MT_JSONTEXT_NOT_TEXT = -2, /* neither a string nor a list of strings */
};

struct mt_jsontext {
	/* decoded strings end to end; part i of key k is buf[off[first[k] + i] .. + len] */
	char *buf;
	size_t n, cap;
	size_t *off, *len;
	int nparts, partcap;
	int first[MT_JSONTEXT_MAX_KEYS];
	int count[MT_JSONTEXT_MAX_KEYS];   /* parts, or MT_JSONTEXT_MISSING / NOT_TEXT */
	int bad_item[MT_JSONTEXT_MAX_KEYS]; /* with NOT_TEXT: the list item at fault, or -1 */
	int64_t surrogates;                 /* lone surrogates replaced by U+FFFD */
};

/* Parse line s[0..n) and decode the values of keys[0..nkeys). -1 with "invalid JSON at
 * column C: reason" (MT_EXIT_DATA) when the line is not valid JSON or not an object. */
int mt_jsontext_parse(struct mt_jsontext *j, const char *s, size_t n, const char *const *keys,
		      int nkeys, struct mt_err *err);
void mt_jsontext_free(struct mt_jsontext *j);

#endif
