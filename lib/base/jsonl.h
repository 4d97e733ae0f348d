/* jsonl.h: JSON lines read through the input layer and parsed with jansson.
 *
 * One JSON value per line; blank lines are skipped. Errors name the input,
 * the member (inside an archive), the line and the column. Lines are counted
 * per member. This file parses; what the keys mean is the caller's business. */
#ifndef MT_JSONL_H
#define MT_JSONL_H

#include <jansson.h>
#include <stdint.h>

#include "base/err.h"
#include "base/input.h"

struct mt_jsonl {
	struct mt_input *in; /* not owned */
	int64_t lineno;      /* line of the value just returned, 1-based */
};

void mt_jsonl_init(struct mt_jsonl *r, struct mt_input *in);
/* Parse one line into *value (a new reference the caller json_decref's).
 * Returns 0 with the reference in *value, -1 with "file:line:col: msg". */
int mt_jsonl_parse(const struct mt_jsonl *r, const char *line, size_t len, json_t **value,
		   struct mt_err *err);
/* Next value of the current member: 1 with *value set, 0 at the member's end, -1 on error. */
int mt_jsonl_next(struct mt_jsonl *r, json_t **value, struct mt_err *err);

/* Look up `key` in an object as a document: a string is one part, a list of
 * strings is several (Megatron's pre-split documents). Sets *parts to the
 * strings (borrowed from obj) and *lens to their byte lengths. Returns the
 * count, or -1 when the key is missing or of another type. The caller frees
 * *parts and *lens. */
int mt_jsonl_get_text(json_t *obj, const char *key, const char ***parts, size_t **lens,
		      struct mt_err *err);

#endif
