/* hfjson.c: tokenizer.json's normalizers and post-processors (see hfjson.h). */
#include "text/hfjson.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/unicode_post9.h"

enum { MT_HF_NFC = 1, MT_HF_NFD, MT_HF_NFKC, MT_HF_NFKD, MT_HF_PREPEND, MT_HF_REPLACE };

#define NORMALIZERS "NFC, NFD, NFKC, NFKD, Prepend, Replace of a string, a Sequence of them"
#define PROCESSORS "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, a Sequence of them"

void mt_hfjson_free(struct mt_hf_extra *x)
{
	for (int i = 0; i < x->nnorm; i++) {
		free(x->norm[i].a);
		free(x->norm[i].b);
	}
	free(x->norm);
	free(x->pre);
	free(x->post);
	memset(x, 0, sizeof(*x));
}

static int add_step(struct mt_hf_extra *x, int op, const char *a, const char *b, struct mt_err *err)
{
	struct mt_hf_norm *n = realloc(x->norm, (size_t)(x->nnorm + 1) * sizeof(*n));

	if (!n)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	x->norm = n;
	n[x->nnorm].op = op;
	n[x->nnorm].a = a ? strdup(a) : NULL;
	n[x->nnorm].b = b ? strdup(b) : NULL;
	x->nnorm++;
	return 0;
}

static int normalizer(struct mt_hf_extra *x, json_t *n, const char *file, struct mt_err *err)
{
	const char *type = json_string_value(json_object_get(n, "type"));
	static const struct { const char *name; int op; } forms[] = {
		{ "NFC", MT_HF_NFC }, { "NFD", MT_HF_NFD }, { "NFKC", MT_HF_NFKC }, { "NFKD", MT_HF_NFKD },
	};

	if (!type)
		return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': a normalizer without a type", file);
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++)
		if (!strcmp(type, forms[i].name))
			return add_step(x, forms[i].op, NULL, NULL, err);
	if (!strcmp(type, "Sequence")) {
		json_t *item;
		size_t i;
		json_array_foreach(json_object_get(n, "normalizers"), i, item)
			if (normalizer(x, item, file, err))
				return -1;
		return 0;
	}
	if (!strcmp(type, "Prepend")) {
		const char *p = json_string_value(json_object_get(n, "prepend"));
		if (!p)
			return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': normalizer Prepend without a string", file);
		return add_step(x, MT_HF_PREPEND, p, NULL, err);
	}
	if (!strcmp(type, "Replace")) {
		const char *pat = json_string_value(json_object_get(json_object_get(n, "pattern"), "String"));
		const char *content = json_string_value(json_object_get(n, "content"));
		if (!pat || !*pat || !content)
			return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': unsupported normalizer Replace (supported: a "
					  "non-empty String pattern, not a Regex)", file);
		return add_step(x, MT_HF_REPLACE, pat, content, err);
	}
	return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': unsupported normalizer '%s' (supported: " NORMALIZERS ")",
			  file, type);
}

/* The id of a special token named in a post-processor: an added token or the vocabulary's. */
static int token_id(const struct mt_vocab *v, const char *text, int64_t id, const char *file, struct mt_err *err)
{
	int32_t found = text ? mt_vocab_find(v, text) : -1;

	if (id < 0)
		id = found;
	if (id < 0 || id >= v->n)
		return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': post-processor token '%s' is not in the vocabulary",
				  file, text ? text : "?");
	return (int)id;
}

static int push(int32_t **a, int *n, int32_t id, struct mt_err *err)
{
	int32_t *na = realloc(*a, (size_t)(*n + 1) * sizeof(*na));

	if (!na)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	*a = na;
	na[(*n)++] = id;
	return 0;
}

static int processor(struct mt_vocab *v, json_t *p, const char *file, struct mt_err *err)
{
	struct mt_hf_extra *x = &v->hf;
	const char *type = json_string_value(json_object_get(p, "type"));

	if (!type)
		return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': a post-processor without a type", file);
	if (!strcmp(type, "ByteLevel"))
		return 0; /* trim_offsets only moves offsets */
	if (!strcmp(type, "Sequence")) {
		json_t *item;
		size_t i;
		json_array_foreach(json_object_get(p, "processors"), i, item)
			if (processor(v, item, file, err))
				return -1;
		return 0;
	}
	if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
		/* "cls": ["[CLS]", 101], "sep": ["[SEP]", 102]: [cls] A [sep] */
		json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
		int c, s;
		if (!json_is_array(cls) || !json_is_array(sep) || json_array_size(cls) != 2 || json_array_size(sep) != 2)
			return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': %s without cls and sep pairs", file, type);
		c = token_id(v, json_string_value(json_array_get(cls, 0)),
			     json_is_integer(json_array_get(cls, 1)) ? json_integer_value(json_array_get(cls, 1)) : -1, file, err);
		if (c < 0)
			return -1;
		s = token_id(v, json_string_value(json_array_get(sep, 0)),
			     json_is_integer(json_array_get(sep, 1)) ? json_integer_value(json_array_get(sep, 1)) : -1, file, err);
		if (s < 0)
			return -1;
		return push(&x->pre, &x->npre, c, err) || push(&x->post, &x->npost, s, err) ? -1 : 0;
	}
	if (!strcmp(type, "TemplateProcessing")) {
		json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens"), *item;
		size_t i;
		int seen_a = 0;
		if (!json_is_array(single))
			return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': TemplateProcessing without a single template", file);
		json_array_foreach(single, i, item) {
			json_t *sp = json_object_get(item, "SpecialToken"), *seq = json_object_get(item, "Sequence"), *ids, *idv;
			const char *name;
			size_t k;
			if (json_is_object(seq)) {
				const char *which = json_string_value(json_object_get(seq, "id"));
				if (seen_a || !which || strcmp(which, "A"))
					return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': TemplateProcessing's single template "
							  "must hold the sequence $A once", file);
				seen_a = 1;
				continue;
			}
			name = json_string_value(json_object_get(sp, "id"));
			if (!name)
				return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': TemplateProcessing: a template piece "
						  "that is neither a SpecialToken nor a Sequence", file);
			/* the special token's ids from special_tokens, else the token of that name */
			ids = json_object_get(json_object_get(specials, name), "ids");
			if (json_is_array(ids) && json_array_size(ids)) {
				json_array_foreach(ids, k, idv) {
					int id = token_id(v, name, json_is_integer(idv) ? json_integer_value(idv) : -1, file, err);
					if (id < 0 || push(seen_a ? &x->post : &x->pre, seen_a ? &x->npost : &x->npre, id, err))
						return -1;
				}
			} else {
				int id = token_id(v, name, -1, file, err);
				if (id < 0 || push(seen_a ? &x->post : &x->pre, seen_a ? &x->npost : &x->npre, id, err))
					return -1;
			}
		}
		if (!seen_a)
			return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': TemplateProcessing's single template has no $A", file);
		return 0;
	}
	return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': unsupported post-processor '%s' (supported: " PROCESSORS ")",
			  file, type);
}

int mt_hfjson_load(struct mt_vocab *v, json_t *root, const char *file, struct mt_err *err)
{
	json_t *n = json_object_get(root, "normalizer"), *p = json_object_get(root, "post_processor");

	if (n && !json_is_null(n) && normalizer(&v->hf, n, file, err))
		return -1;
	if (p && !json_is_null(p) && processor(v, p, file, err))
		return -1;
	return 0;
}

static void vocab_free(struct mt_vocab *v)
{
	mt_hfjson_free(&v->hf);
}

const struct mt_vocab_ops mt_hfjson_ops = {
	.name = "tokenizer.json",
	.load_json = mt_hfjson_load,
	.free = vocab_free,
};

/* Hugging Face tokenizers normalizes with Unicode 9.0 tables: a code point assigned later
 * is left as it is and counts as a starter (combining class 0). unicode_post9.h lists those
 * of them that utf8proc (a later Unicode) would change, move or compose; the text is
 * normalized between them, and they are copied unchanged. Every code point of the table is
 * at least MT_UNICODE_POST9_MIN, so its UTF-8 lead byte is at least POST9_LEAD (UTF-8 keeps
 * code point order): bytes below it (ASCII, continuation bytes, most alphabets) are skipped
 * without decoding. */
#define UTF8_LEAD(c) ((c) < 0x80 ? (c) : (c) < 0x800 ? 0xc0 | (c) >> 6 : (c) < 0x10000 ? 0xe0 | (c) >> 12 : 0xf0 | (c) >> 18)
#define POST9_LEAD UTF8_LEAD(MT_UNICODE_POST9_MIN)
_Static_assert(POST9_LEAD > 0x80 && POST9_LEAD < 0xf0, "the table's first code point needs two or three bytes");

/* Is c in the table? Below U+20000 a bitmap of 256-code-point blocks answers most (CJK,
 * kana, Hangul, emoji hold none). */
static int post9(uint32_t c)
{
	size_t lo = 0, hi = sizeof(mt_unicode_post9) / sizeof(mt_unicode_post9[0]);

	if (c < 0x20000 && !(mt_unicode_post9_blocks[c >> 14] >> (c >> 8 & 63) & 1))
		return 0;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < mt_unicode_post9[mid][0])
			hi = mid;
		else if (c > mt_unicode_post9[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

/* The offset of the next table code point in s[i..n) (its length in *len), else n. Bytes
 * that are not well-formed UTF-8 are passed over: utf8proc reports them. */
static size_t next_post9(const utf8proc_uint8_t *s, size_t i, size_t n, size_t *len)
{
	while (i < n) {
		utf8proc_int32_t c;
		utf8proc_ssize_t k;
		if (s[i] < POST9_LEAD) {
			i++;
			continue;
		}
		k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &c);
		if (k <= 0) {
			i++;
			continue;
		}
		if (post9((uint32_t)c)) {
			*len = (size_t)k;
			return i;
		}
		i += (size_t)k;
	}
	return n;
}

/* utf8proc_map of s[0..n) as Unicode 9.0 tables give it (see above); *out malloc'ed. */
static utf8proc_ssize_t map_unicode9(const utf8proc_uint8_t *s, size_t n, utf8proc_uint8_t **out, int opt)
{
	size_t len = 0, at = next_post9(s, 0, n, &len), start = 0, k = 0, cap = n + 16;
	utf8proc_uint8_t *buf;

	if (at == n) /* nothing the tables differ on: the whole text at once */
		return utf8proc_map(s, (utf8proc_ssize_t)n, out, (utf8proc_option_t)opt);
	buf = malloc(cap);
	if (!buf)
		return UTF8PROC_ERROR_NOMEM;
	for (;;) {
		utf8proc_uint8_t *piece = NULL;
		utf8proc_ssize_t r = 0;
		size_t need;
		if (at > start) {
			r = utf8proc_map(s + start, (utf8proc_ssize_t)(at - start), &piece, (utf8proc_option_t)opt);
			if (r < 0) {
				free(buf);
				return r;
			}
		}
		need = k + (size_t)r + len + 1;
		if (need > cap) {
			utf8proc_uint8_t *nb;
			cap = need > 2 * cap ? need : 2 * cap;
			nb = realloc(buf, cap);
			if (!nb) {
				free(piece);
				free(buf);
				return UTF8PROC_ERROR_NOMEM;
			}
			buf = nb;
		}
		if (r)
			memcpy(buf + k, piece, (size_t)r);
		free(piece);
		k += (size_t)r;
		if (at == n)
			break;
		memcpy(buf + k, s + at, len); /* the later code point, as it is */
		k += len;
		start = at + len;
		at = next_post9(s, start, n, &len);
	}
	buf[k] = '\0';
	*out = buf;
	return (utf8proc_ssize_t)k;
}

/* s with every occurrence of a replaced by b (malloc'ed) */
static char *replace(const char *s, size_t n, const char *a, const char *b, size_t *outn)
{
	size_t al = strlen(a), bl = strlen(b), cnt = 0, k = 0;
	const char *p = s, *hit;
	char *out;

	while ((hit = memmem(p, n - (size_t)(p - s), a, al))) {
		cnt++;
		p = hit + al;
	}
	out = malloc(n + cnt * (bl > al ? bl - al : 0) + 1);
	if (!out)
		return NULL;
	p = s;
	while ((hit = memmem(p, n - (size_t)(p - s), a, al))) {
		memcpy(out + k, p, (size_t)(hit - p));
		k += (size_t)(hit - p);
		memcpy(out + k, b, bl);
		k += bl;
		p = hit + al;
	}
	memcpy(out + k, p, n - (size_t)(p - s));
	k += n - (size_t)(p - s);
	out[k] = '\0';
	*outn = k;
	return out;
}

int mt_hfjson_normalize(const struct mt_vocab *v, const char *s, size_t n, char **out, size_t *outn,
			struct mt_err *err)
{
	char *cur = malloc(n + 1);

	if (!cur)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	memcpy(cur, s, n);
	cur[n] = '\0';
	for (int i = 0; i < v->hf.nnorm; i++) {
		const struct mt_hf_norm *st = &v->hf.norm[i];
		char *next = NULL;
		size_t nn = 0;
		utf8proc_ssize_t r;
		utf8proc_uint8_t *mapped = NULL;
		int opt = UTF8PROC_STABLE;

		switch (st->op) {
		case MT_HF_PREPEND:
			if (n == 0)
				continue; /* Hugging Face prepends only to a non-empty text */
			nn = strlen(st->a) + n;
			next = malloc(nn + 1);
			if (next) {
				memcpy(next, st->a, strlen(st->a));
				memcpy(next + strlen(st->a), cur, n + 1);
			}
			break;
		case MT_HF_REPLACE:
			next = replace(cur, n, st->a, st->b, &nn);
			break;
		default:
			opt |= st->op == MT_HF_NFC || st->op == MT_HF_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
			if (st->op == MT_HF_NFKC || st->op == MT_HF_NFKD)
				opt |= UTF8PROC_COMPAT;
			r = map_unicode9((const utf8proc_uint8_t *)cur, n, &mapped, opt);
			if (r < 0) {
				free(cur);
				return mt_err_set(err, MT_EXIT_DATA, "normalizing text: %s", utf8proc_errmsg(r));
			}
			next = (char *)mapped;
			nn = (size_t)r;
			break;
		}
		free(cur);
		if (!next)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		cur = next;
		n = nn;
	}
	*out = cur;
	*outn = n;
	return 0;
}
