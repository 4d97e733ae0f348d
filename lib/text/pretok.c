/* pretok.c: pre-tokenization patterns on PCRE2 (see pretok.h). */
#include "text/pretok.h"

#include "text/unicode_classes.h"

#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"

static const struct {
	const char *name, *re;
} named[] = {
	{ "gpt2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+" },
	{ "cl100k", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
		    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
	{ "o200k", "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
		   "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
		   "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
		   "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
};

static const struct {
	const char *alias, *name;
} aliases[] = {
	{ "r50k", "gpt2" }, { "r50k_base", "gpt2" }, { "p50k_base", "gpt2" }, { "GPT2", "gpt2" },
	{ "cl100k_base", "cl100k" }, { "o200k_base", "o200k" },
};

const char *mt_pretok_named(const char *name)
{
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (strcmp(name, aliases[i].alias) == 0)
			name = aliases[i].name;
	for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
		if (strcmp(name, named[i].name) == 0)
			return named[i].re;
	return NULL;
}

static const char *class_members(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(mt_unicode_classes) / sizeof(mt_unicode_classes[0]); i++)
		if (strlen(mt_unicode_classes[i].name) == n && memcmp(mt_unicode_classes[i].name, name, n) == 0)
			return mt_unicode_classes[i].members;
	return NULL;
}

/* Spell out \s, \S, \p{X} and \P{X} with the Unicode 16 sets of unicode_classes.h, so
 * PCRE2's own (older) tables are never consulted for them. Tracks character classes:
 * inside [...] a set expands to bare members; a negated set there has no expansion and
 * is refused. Properties without a table entry are left to PCRE2. */
static char *rewrite(const char *re, struct mt_err *err)
{
	struct mt_strbuf b = MT_STRBUF_INIT;
	size_t n = strlen(re);
	int in_class = 0, bad = 0;

	for (size_t i = 0; i < n && !bad; i++) {
		char c = re[i];
		if (c == '\\' && i + 1 < n) {
			char d = re[i + 1];
			const char *members = NULL, *name = NULL;
			size_t nlen = 0, skip = 2;
			int neg = d == 'S' || d == 'P';

			if (d == 's' || d == 'S') {
				members = class_members("WS", 2);
			} else if ((d == 'p' || d == 'P') && i + 2 < n) {
				if (re[i + 2] == '{') {
					const char *close = strchr(re + i + 3, '}');
					if (close) {
						name = re + i + 3;
						nlen = (size_t)(close - name);
						skip = (size_t)(close - (re + i)) + 1;
					}
				} else {
					name = re + i + 2;
					nlen = 1;
					skip = 3;
				}
				if (name && nlen && name[0] == '^') /* \p{^L} is \P{L} */
					neg = !neg, name++, nlen--;
				if (name)
					members = class_members(name, nlen);
			}
			if (!members) {
				bad |= mt_strbuf_append(&b, re + i, 2);
				i++;
				continue;
			}
			if (in_class && neg) {
				mt_strbuf_free(&b);
				mt_err_set(err, MT_EXIT_USAGE, "pattern: a negated set (\\S, \\P{..}) inside a character class is not supported");
				return NULL;
			}
			if (!in_class)
				bad |= mt_strbuf_append(&b, neg ? "[^" : "[", neg ? 2 : 1);
			bad |= mt_strbuf_append(&b, members, strlen(members));
			if (!in_class)
				bad |= mt_strbuf_append(&b, "]", 1);
			i += skip - 1;
			continue;
		}
		if (c == '[' && !in_class) {
			in_class = 1;
			bad |= mt_strbuf_append(&b, re + i, 1);
			/* a leading ^ and a leading ] belong to the class syntax */
			if (i + 1 < n && re[i + 1] == '^')
				bad |= mt_strbuf_append(&b, re + ++i, 1);
			if (i + 1 < n && re[i + 1] == ']')
				bad |= mt_strbuf_append(&b, re + ++i, 1);
			continue;
		}
		if (c == ']' && in_class)
			in_class = 0;
		bad |= mt_strbuf_append(&b, &c, 1);
	}
	if (bad || !b.s) {
		mt_strbuf_free(&b);
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		return NULL;
	}
	return b.s;
}

int mt_pretok_compile(struct mt_pretok *p, const char *name_or_regex, struct mt_err *err)
{
	const char *re = mt_pretok_named(name_or_regex);
	int code;
	PCRE2_SIZE off;

	memset(p, 0, sizeof(*p));
	if (!re)
		re = name_or_regex;
	p->source = rewrite(re, err);
	if (!p->source)
		return -1;
	p->re = pcre2_compile((PCRE2_SPTR)p->source, PCRE2_ZERO_TERMINATED,
			      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &code, &off,
			      NULL);
	if (!p->re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(code, msg, sizeof(msg));
		mt_err_set(err, MT_EXIT_USAGE, "pre-tokenization pattern '%s': %s at offset %zu", name_or_regex,
			   (char *)msg, (size_t)off);
		free(p->source);
		p->source = NULL;
		return -1;
	}
	/* JIT is a large speed-up but optional: the interpreter gives the same matches */
	pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE);
	return 0;
}

void mt_pretok_free(struct mt_pretok *p)
{
	pcre2_code_free(p->re);
	free(p->source);
	memset(p, 0, sizeof(*p));
}

int mt_pretok_iter_init(struct mt_pretok_iter *it, const struct mt_pretok *p, struct mt_err *err)
{
	memset(it, 0, sizeof(*it));
	it->p = p;
	it->md = pcre2_match_data_create_from_pattern(p->re, NULL);
	it->mc = pcre2_match_context_create(NULL);
	/* long runs of whitespace before a lookahead need more than the default 32 KiB */
	it->stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
	if (!it->md || !it->mc || !it->stack) {
		mt_pretok_iter_free(it);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	pcre2_jit_stack_assign(it->mc, NULL, it->stack);
	return 0;
}

void mt_pretok_iter_free(struct mt_pretok_iter *it)
{
	pcre2_match_data_free(it->md);
	pcre2_match_context_free(it->mc);
	pcre2_jit_stack_free(it->stack);
	memset(it, 0, sizeof(*it));
}

void mt_pretok_iter_reset(struct mt_pretok_iter *it, const char *s, size_t n)
{
	it->s = s;
	it->n = n;
	it->pos = 0;
	it->pending = 0;
}

int mt_pretok_iter_next(struct mt_pretok_iter *it, size_t *b, size_t *e)
{
	PCRE2_SIZE *ov;
	int r;

	if (it->pending) {
		it->pending = 0;
		*b = it->next_start;
		*e = it->pos = it->next_end;
		return 1;
	}
	while (it->pos < it->n) {
		r = pcre2_match(it->p->re, (PCRE2_SPTR)it->s, it->n, it->pos, PCRE2_NO_UTF_CHECK, it->md, it->mc);
		if (r < 0) {
			/* no further match: the rest is a gap */
			if (it->p->keep_gaps) {
				*b = it->pos;
				*e = it->pos = it->n;
				return 1;
			}
			it->pos = it->n;
			return 0;
		}
		ov = pcre2_get_ovector_pointer(it->md);
		if (ov[1] == ov[0]) {
			/* an empty match: step over one character, as find_iter does */
			size_t q = ov[0] + 1;
			while (q < it->n && ((unsigned char)it->s[q] & 0xC0) == 0x80)
				q++;
			if (it->p->keep_gaps && ov[0] > it->pos) {
				*b = it->pos;
				*e = it->pos = ov[0];
				return 1;
			}
			it->pos = q;
			continue;
		}
		if (ov[0] > it->pos && it->p->keep_gaps) {
			*b = it->pos;
			*e = ov[0];
			it->next_start = ov[0];
			it->next_end = ov[1];
			it->pending = 1;
			it->pos = ov[0];
			return 1;
		}
		*b = ov[0];
		*e = it->pos = ov[1];
		return 1;
	}
	return 0;
}
