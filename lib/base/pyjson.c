/* pyjson.c: Python json.dumps(indent=4) text (see pyjson.h). */
#include "base/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"

void mt_pyjson_init(struct mt_pyjson *j)
{
	memset(j, 0, sizeof(*j));
	j->first[0] = 1;
}

void mt_pyjson_free(struct mt_pyjson *j)
{
	free(j->s);
	memset(j, 0, sizeof(*j));
}

static void put(struct mt_pyjson *j, const char *s, size_t n)
{
	if (mt_array_grow(&j->s, &j->cap, j->n + n + 1, 1, 1024)) {
		j->oom = 1;
		return;
	}
	memcpy(j->s + j->n, s, n);
	j->n += n;
	j->s[j->n] = '\0';
}

static void puts_(struct mt_pyjson *j, const char *s) { put(j, s, strlen(s)); }

static void newline(struct mt_pyjson *j)
{
	put(j, "\n", 1);
	for (int i = 0; i < j->depth; i++)
		put(j, "    ", 4);
}

/* Before a value: a comma and a new line inside a container (not after a key). */
static void before_value(struct mt_pyjson *j)
{
	if (j->after_key) {
		j->after_key = 0;
		return;
	}
	if (j->depth == 0)
		return;
	if (!j->first[j->depth])
		put(j, ",", 1);
	j->first[j->depth] = 0;
	newline(j);
}

static void quoted(struct mt_pyjson *j, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	char buf[16];

	put(j, "\"", 1);
	while (*p) {
		unsigned cp = *p;
		int k = 1;
		if (cp >= 0x80) {
			/* decode UTF-8 (input is trusted to be valid) */
			if ((cp & 0xE0) == 0xC0)
				cp = (cp & 0x1F) << 6 | (p[1] & 0x3F), k = 2;
			else if ((cp & 0xF0) == 0xE0)
				cp = (cp & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F), k = 3;
			else
				cp = (cp & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F), k = 4;
		}
		p += k;
		switch (cp) {
		case '"': puts_(j, "\\\""); continue;
		case '\\': puts_(j, "\\\\"); continue;
		case '\n': puts_(j, "\\n"); continue;
		case '\r': puts_(j, "\\r"); continue;
		case '\t': puts_(j, "\\t"); continue;
		case '\b': puts_(j, "\\b"); continue;
		case '\f': puts_(j, "\\f"); continue;
		}
		if (cp < 0x20 || (cp >= 0x80 && cp < 0x10000)) {
			snprintf(buf, sizeof(buf), "\\u%04x", cp);
			puts_(j, buf);
		} else if (cp >= 0x10000) {
			cp -= 0x10000;
			snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
			puts_(j, buf);
		} else {
			char c = (char)cp;
			put(j, &c, 1);
		}
	}
	put(j, "\"", 1);
}

void mt_pyjson_key(struct mt_pyjson *j, const char *key)
{
	before_value(j);
	quoted(j, key);
	put(j, ": ", 2);
	j->after_key = 1;
}

static void begin(struct mt_pyjson *j, const char *open)
{
	before_value(j);
	puts_(j, open);
	j->depth++;
	j->first[j->depth] = 1;
}

static void end(struct mt_pyjson *j, const char *close)
{
	int empty = j->first[j->depth];
	j->depth--;
	if (!empty)
		newline(j);
	puts_(j, close);
}

void mt_pyjson_begin_object(struct mt_pyjson *j) { begin(j, "{"); }
void mt_pyjson_end_object(struct mt_pyjson *j) { end(j, "}"); }
void mt_pyjson_begin_array(struct mt_pyjson *j) { begin(j, "["); }
void mt_pyjson_end_array(struct mt_pyjson *j) { end(j, "]"); }

void mt_pyjson_string(struct mt_pyjson *j, const char *s)
{
	before_value(j);
	quoted(j, s);
}

void mt_pyjson_int(struct mt_pyjson *j, int64_t v)
{
	char buf[32];

	before_value(j);
	snprintf(buf, sizeof(buf), "%lld", (long long)v);
	puts_(j, buf);
}

void mt_pyjson_null(struct mt_pyjson *j)
{
	mt_pyjson_literal(j, "null");
}

void mt_pyjson_literal(struct mt_pyjson *j, const char *lit)
{
	before_value(j);
	puts_(j, lit);
}

void mt_pyjson_repr_float(char *buf, size_t n, double v)
{
	char e[40], digits[20], *p;
	int prec, exp, nd = 0, neg;

	if (isnan(v) || isinf(v)) {
		snprintf(buf, n, isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
		return;
	}
	if (v == 0) {
		snprintf(buf, n, signbit(v) ? "-0.0" : "0.0");
		return;
	}
	/* the shortest digits that read back as v (Python's repr picks the same) */
	for (prec = 1; prec <= 17; prec++) {
		snprintf(e, sizeof(e), "%.*e", prec - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	neg = e[0] == '-';
	for (p = e + neg; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	exp = atoi(p + 1);
	if (exp >= -4 && exp < 16) {
		/* positional, with at least one digit after the point */
		size_t k = 0;
		if (neg)
			buf[k++] = '-';
		if (exp < 0) {
			k += (size_t)snprintf(buf + k, n - k, "0.");
			for (int i = 0; i < -exp - 1; i++)
				buf[k++] = '0';
			snprintf(buf + k, n - k, "%s", digits);
		} else {
			for (int i = 0; i <= exp; i++)
				buf[k++] = i < nd ? digits[i] : '0';
			buf[k++] = '.';
			if (nd > exp + 1)
				k += (size_t)snprintf(buf + k, n - k, "%s", digits + exp + 1);
			else
				buf[k++] = '0';
			buf[k] = '\0';
		}
	} else {
		/* d[.ddd]e+XX, the exponent with at least two digits */
		snprintf(buf, n, "%s%c%s%s%se%c%02d", neg ? "-" : "", digits[0], nd > 1 ? "." : "", nd > 1 ? digits + 1 : "",
			 "", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
	}
}

void mt_pyjson_float(struct mt_pyjson *j, double v)
{
	char buf[40];

	before_value(j);
	mt_pyjson_repr_float(buf, sizeof(buf), v);
	puts_(j, buf);
}

void mt_pyjson_value(struct mt_pyjson *j, json_t *v)
{
	const char *k;
	json_t *item;
	size_t i;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		mt_pyjson_begin_object(j);
		json_object_foreach(v, k, item) {
			mt_pyjson_key(j, k);
			mt_pyjson_value(j, item);
		}
		mt_pyjson_end_object(j);
		break;
	case JSON_ARRAY:
		mt_pyjson_begin_array(j);
		json_array_foreach(v, i, item)
			mt_pyjson_value(j, item);
		mt_pyjson_end_array(j);
		break;
	case JSON_STRING: mt_pyjson_string(j, json_string_value(v)); break;
	case JSON_INTEGER: mt_pyjson_int(j, json_integer_value(v)); break;
	case JSON_REAL: mt_pyjson_float(j, json_real_value(v)); break;
	case JSON_TRUE: mt_pyjson_literal(j, "true"); break;
	case JSON_FALSE: mt_pyjson_literal(j, "false"); break;
	default: mt_pyjson_null(j); break;
	}
}
