/* pyjson.h: JSON text exactly as Python's json.dumps(obj, indent=4) writes it.
 *
 * Megatron names its index caches by the MD5 of such a text, so byte equality
 * matters: key order as given, 4-space indent, ", " never used (newlines instead),
 * floats as Python's repr (shortest round-trip digits, "1.0", "1e-05"), non-ASCII
 * escaped as \uXXXX (ensure_ascii), empty containers as [] and {}. A small builder:
 * the caller emits values in order; this file keeps the commas and the indentation. */
#ifndef MT_PYJSON_H
#define MT_PYJSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct mt_pyjson {
	char *s;
	size_t n, cap;
	int depth;
	int first[64];   /* no member written yet at this depth */
	int after_key;   /* a key was just written: the value follows on the same line */
	int oom;
};

void mt_pyjson_init(struct mt_pyjson *j);
void mt_pyjson_free(struct mt_pyjson *j);
void mt_pyjson_key(struct mt_pyjson *j, const char *key); /* inside an object, before the value */
void mt_pyjson_begin_object(struct mt_pyjson *j);
void mt_pyjson_end_object(struct mt_pyjson *j);
void mt_pyjson_begin_array(struct mt_pyjson *j);
void mt_pyjson_end_array(struct mt_pyjson *j);
void mt_pyjson_string(struct mt_pyjson *j, const char *s);
void mt_pyjson_int(struct mt_pyjson *j, int64_t v);
void mt_pyjson_float(struct mt_pyjson *j, double v);
void mt_pyjson_null(struct mt_pyjson *j);
void mt_pyjson_literal(struct mt_pyjson *j, const char *lit); /* true, false */
/* A jansson value (objects keep their key order). */
void mt_pyjson_value(struct mt_pyjson *j, json_t *v);
/* Python's repr of a float. */
void mt_pyjson_repr_float(char *buf, size_t n, double v);

#endif
