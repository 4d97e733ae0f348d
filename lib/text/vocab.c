/* vocab.c: loading byte-level BPE vocabularies into struct mt_vocab (see vocab.h). */
#include "text/vocab.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/input.h"

/* ---- GPT-2's byte <-> character mapping ------------------------------------------- */

static uint32_t byte_cp[256];
static int16_t cp_byte[512];
static int mapping_ready;

static void mapping_init(void)
{
	int n = 0;

	if (mapping_ready)
		return;
	for (int i = 0; i < 512; i++)
		cp_byte[i] = -1;
	/* printable Latin-1 bytes map to themselves, the rest to 256, 257, ... */
	for (int b = 0; b < 256; b++) {
		int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
		byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
		cp_byte[byte_cp[b]] = (int16_t)b;
	}
	mapping_ready = 1;
}

uint32_t mt_vocab_byte_to_cp(uint8_t b)
{
	mapping_init();
	return byte_cp[b];
}

int mt_vocab_cp_to_byte(uint32_t cp)
{
	mapping_init();
	return cp < 512 ? cp_byte[cp] : -1;
}

/* Decode a mapped token string ("Ġthe") into raw bytes; -1 on a character outside
 * the mapping or bad UTF-8. out must hold strlen(s) bytes. */
static int unmap_token(const char *s, size_t n, char *out, size_t *outn)
{
	size_t i = 0, k = 0;

	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		uint32_t cp;
		int b;

		if (c < 0x80) {
			cp = c;
			i++;
		} else if ((c & 0xE0) == 0xC0 && i + 1 < n) {
			cp = (uint32_t)(c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F);
			i += 2;
		} else {
			return -1; /* the mapping only uses code points below 512 */
		}
		b = mt_vocab_cp_to_byte(cp);
		if (b < 0)
			return -1;
		out[k++] = (char)b;
	}
	*outn = k;
	return 0;
}

/* ---- building ------------------------------------------------------------------------ */

static int reserve(struct mt_vocab *v, int32_t n, size_t arena_bytes, struct mt_err *err)
{
	v->n = n;
	v->arena = malloc(arena_bytes ? arena_bytes : 1);
	v->off = calloc((size_t)n, sizeof(*v->off));
	v->len = calloc((size_t)n, sizeof(*v->len));
	v->special = calloc((size_t)n, 1);
	v->rank = malloc((size_t)n * sizeof(*v->rank));
	if (!v->arena || !v->off || !v->len || !v->special || !v->rank)
		return mt_err_set(err, MT_EXIT_IO, "out of memory for a vocabulary of %d tokens", n);
	for (int32_t i = 0; i < n; i++)
		v->rank[i] = -1;
	return 0;
}

static int32_t tab_find_h(const struct mt_vocab *v, const void *bytes, size_t n, uint64_t h)
{
	uint64_t i = h & v->tab_mask;

	for (;;) {
		int32_t id = v->tab[i];
		if (id < 0)
			return -1;
		if (v->len[id] == n && memcmp(v->arena + v->off[id], bytes, n) == 0)
			return id;
		i = (i + 1) & v->tab_mask;
	}
}

static int32_t tab_find(const struct mt_vocab *v, const void *bytes, size_t n)
{
	return tab_find_h(v, bytes, n, mt_vocab_hash(bytes, n));
}

int32_t mt_vocab_lookup(const struct mt_vocab *v, const void *bytes, size_t n)
{
	return v->tab ? tab_find(v, bytes, n) : -1;
}

int32_t mt_vocab_lookup_hashed(const struct mt_vocab *v, const void *bytes, size_t n, uint64_t h)
{
	return v->tab ? tab_find_h(v, bytes, n, h) : -1;
}

int32_t mt_vocab_find(const struct mt_vocab *v, const char *text)
{
	size_t n = strlen(text);
	int32_t id = mt_vocab_lookup(v, text, n);

	if (id >= 0)
		return id;
	for (int32_t i = 0; i < v->n; i++)
		if (v->special[i] && v->len[i] == n && memcmp(v->arena + v->off[i], text, n) == 0)
			return i;
	return -1;
}

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t p = 16;

	while (p < n)
		p <<= 1;
	return p;
}

/* bytes -> id for every non-special token; a duplicate is an error. */
static int build_table(struct mt_vocab *v, const char *file, struct mt_err *err)
{
	uint64_t size = pow2_at_least((uint64_t)v->n * 2);

	v->tab = malloc(size * sizeof(*v->tab));
	if (!v->tab)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	memset(v->tab, 0xff, size * sizeof(*v->tab));
	v->tab_mask = size - 1;
	for (int i = 0; i < 256; i++)
		v->byte_id[i] = -1;
	for (int32_t id = 0; id < v->n; id++) {
		const char *b = v->arena + v->off[id];
		uint64_t i;

		if (v->special[id] || (v->len[id] == 0))
			continue;
		if (tab_find(v, b, v->len[id]) >= 0)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': token %d has the same bytes as token %d",
					  file, id, tab_find(v, b, v->len[id]));
		i = mt_vocab_hash(b, v->len[id]) & v->tab_mask;
		while (v->tab[i] >= 0)
			i = (i + 1) & v->tab_mask;
		v->tab[i] = id;
		if (v->len[id] == 1)
			v->byte_id[(unsigned char)b[0]] = id;
	}
	for (int i = 0; i < 256; i++)
		if (v->byte_id[i] < 0)
			return mt_err_set(err, MT_EXIT_DATA,
					  "'%s': byte 0x%02x has no token; a byte-level BPE vocabulary needs all 256",
					  file, i);
	return 0;
}

static int pairs_alloc(struct mt_vocab *v, uint64_t entries, struct mt_err *err)
{
	uint64_t size = pow2_at_least(entries * 2 + 16);

	v->pairs = calloc(size, sizeof(*v->pairs));
	if (!v->pairs)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	v->pair_mask = size - 1;
	return 0;
}

/* Insert unless present; returns 1 if inserted. */
static int pair_put(struct mt_vocab *v, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	uint64_t i = (h ^ (h >> 29)) & v->pair_mask;

	while (v->pairs[i].key) {
		if (v->pairs[i].key == key)
			return 0;
		i = (i + 1) & v->pair_mask;
	}
	v->pairs[i].key = key;
	v->pairs[i].rank = rank;
	v->pairs[i].merged = merged;
	return 1;
}

/* tiktoken's rule: any two adjacent tokens whose concatenation is a ranked token merge
 * into it, at that token's rank. So every split of every ranked token is a pair. */
static int build_pairs_all_splits(struct mt_vocab *v, struct mt_err *err)
{
	uint64_t total = 0;

	for (int32_t id = 0; id < v->n; id++)
		if (v->rank[id] >= 0 && v->len[id] > 1)
			total += v->len[id] - 1;
	if (pairs_alloc(v, total, err))
		return -1;
	for (int32_t id = 0; id < v->n; id++) {
		const char *b = v->arena + v->off[id];
		uint32_t n = v->len[id];

		if (v->rank[id] < 0 || n < 2)
			continue;
		for (uint32_t k = 1; k < n; k++) {
			int32_t l = tab_find(v, b, k), r;
			if (l < 0 || v->rank[l] < 0)
				continue;
			r = tab_find(v, b + k, n - k);
			if (r < 0 || v->rank[r] < 0)
				continue;
			pair_put(v, l, r, v->rank[id], id);
		}
	}
	return 0;
}

void mt_vocab_free(struct mt_vocab *v)
{
	if (v->ops && v->ops->free)
		v->ops->free(v);
	free(v->arena);
	free(v->off);
	free(v->len);
	free(v->special);
	free(v->rank);
	free(v->tab);
	free(v->pairs);
	free(v->pattern);
	memset(v, 0, sizeof(*v));
}

int mt_vocab_add_special(struct mt_vocab *v, const char *text, int32_t id, struct mt_err *err)
{
	size_t n = strlen(text);
	char *na;
	int64_t used = 0;

	if (id < 0 || id >= v->n)
		return mt_err_set(err, MT_EXIT_DATA, "special token '%s': id %d is outside the vocabulary", text, id);
	for (int32_t i = 0; i < v->n; i++)
		if (v->off[i] + (int64_t)v->len[i] > used)
			used = v->off[i] + (int64_t)v->len[i];
	na = realloc(v->arena, (size_t)used + n + 1);
	if (!na)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	v->arena = na;
	memcpy(v->arena + used, text, n);
	v->off[id] = used;
	v->len[id] = (uint32_t)n;
	v->special[id] = 1;
	v->rank[id] = -1;
	return 0;
}

/* ---- GPT-2: vocab.json + merges.txt ------------------------------------------------- */

struct merge_line {
	char *a, *b; /* mapped strings, pointing into a line buffer copy */
	int64_t line;
};

int mt_vocab_load_gpt2(struct mt_vocab *v, const char *vocab_json, const char *merges_txt,
		       struct mt_err *err)
{
	json_error_t je;
	json_t *root = NULL;
	const char *key;
	json_t *val;
	int64_t maxid = -1;
	size_t arena = 0, k = 0;
	struct mt_input *in = NULL;
	char *line, *tmp = NULL;
	size_t len;
	int64_t lineno = 0, nmerge = 0;
	int r, rc = -1;

	memset(v, 0, sizeof(*v));
	v->kind = MT_VOCAB_GPT2;
	v->eod = -1;
	v->ignore_merges = 1;
	root = json_load_file(vocab_json, 0, &je);
	if (!root) {
		if (je.line < 1)
			return mt_err_set(err, MT_EXIT_IO, "cannot read vocabulary '%s': %s", vocab_json, je.text);
		return mt_err_set(err, MT_EXIT_DATA, "vocabulary '%s':%d:%d: %s", vocab_json, je.line,
				  je.column, je.text);
	}
	if (!json_is_object(root)) {
		mt_err_set(err, MT_EXIT_DATA, "vocabulary '%s': expected a JSON object of token -> id", vocab_json);
		goto out;
	}
	json_object_foreach(root, key, val) {
		json_int_t id;
		if (!json_is_integer(val) || (id = json_integer_value(val)) < 0 || id > INT32_MAX - 1) {
			mt_err_set(err, MT_EXIT_DATA, "vocabulary '%s': token '%s' has no valid id", vocab_json, key);
			goto out;
		}
		if (id > maxid)
			maxid = id;
		arena += strlen(key);
	}
	if (maxid < 255) {
		mt_err_set(err, MT_EXIT_DATA, "vocabulary '%s': fewer than 256 tokens", vocab_json);
		goto out;
	}
	if (reserve(v, (int32_t)(maxid + 1), arena, err))
		goto out;
	tmp = malloc(arena + 1);
	if (!tmp) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	json_object_foreach(root, key, val) {
		int32_t id = (int32_t)json_integer_value(val);
		size_t n;

		if (v->len[id] || v->special[id]) {
			mt_err_set(err, MT_EXIT_DATA, "vocabulary '%s': id %d is used twice (token '%s')",
				   vocab_json, id, key);
			goto out;
		}
		size_t kl = strlen(key);
		int looks_special = kl > 4 && strncmp(key, "<|", 2) == 0 && strcmp(key + kl - 2, "|>") == 0;
		if (looks_special || unmap_token(key, kl, tmp, &n) != 0 || n == 0) {
			/* a special token such as <|endoftext|>, or not in the byte mapping */
			if (strncmp(key, "<|", 2) != 0 && strncmp(key, "<", 1) != 0) {
				mt_err_set(err, MT_EXIT_DATA,
					   "vocabulary '%s': token '%s' is not in GPT-2's byte-level alphabet",
					   vocab_json, key);
				goto out;
			}
			memcpy(v->arena + k, key, strlen(key));
			v->off[id] = (int64_t)k;
			v->len[id] = (uint32_t)strlen(key);
			v->special[id] = 1;
			k += strlen(key);
			continue;
		}
		memcpy(v->arena + k, tmp, n);
		v->off[id] = (int64_t)k;
		v->len[id] = (uint32_t)n;
		k += n;
	}
	if (build_table(v, vocab_json, err))
		goto out;
	/* single bytes rank first, then each merge's result by merge order */
	for (int i = 0; i < 256; i++)
		v->rank[v->byte_id[i]] = i;
	if (mt_input_open(&in, merges_txt, err) || mt_input_next(in, err) < 0)
		goto out;
	while ((r = mt_input_getline(in, &line, &len, err)) == 1) {
		char *sp, ab[4096];
		size_t na, nb;
		int32_t a, b, m;

		lineno++;
		if (len && line[len - 1] == '\r')
			line[--len] = '\0';
		if (len == 0 || (lineno == 1 && strncmp(line, "#version", 8) == 0))
			continue;
		sp = memchr(line, ' ', len);
		if (!sp || sp == line || sp == line + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - line))) {
			mt_err_set(err, MT_EXIT_DATA, "merges '%s':%lld: expected two tokens separated by one space",
				   merges_txt, (long long)lineno);
			goto out;
		}
		if (len > sizeof(ab) / 2 || unmap_token(line, (size_t)(sp - line), ab, &na) ||
		    unmap_token(sp + 1, len - (size_t)(sp + 1 - line), ab + na, &nb)) {
			mt_err_set(err, MT_EXIT_DATA, "merges '%s':%lld: a token is not in GPT-2's byte-level alphabet",
				   merges_txt, (long long)lineno);
			goto out;
		}
		a = tab_find(v, ab, na);
		b = tab_find(v, ab + na, nb);
		m = tab_find(v, ab, na + nb);
		if (a < 0 || b < 0 || m < 0) {
			*sp = '\0';
			mt_err_set(err, MT_EXIT_DATA, "merges '%s':%lld: '%s' is not in the vocabulary '%s'",
				   merges_txt, (long long)lineno, a < 0 ? line : b < 0 ? sp + 1 : "(merged token)",
				   vocab_json);
			goto out;
		}
		if (v->rank[m] < 0)
			v->rank[m] = (int32_t)(256 + nmerge);
		nmerge++;
	}
	if (r < 0)
		goto out;
	if (build_pairs_all_splits(v, err))
		goto out;
	v->eod = mt_vocab_find(v, "<|endoftext|>");
	v->vocab_size = v->n;
	v->pattern = strdup("gpt2");
	rc = 0;
out:
	if (in)
		mt_input_close(in);
	free(tmp);
	json_decref(root);
	if (rc)
		mt_vocab_free(v);
	return rc;
}

static int parse_dec(const char *s, long long *out)
{
	long long v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*s - '0');
	}
	*out = v;
	return 0;
}

/* ---- tiktoken rank files --------------------------------------------------------------- */

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Standard base64 with padding; returns the decoded length or -1. */
static long b64_decode(const char *s, size_t n, char *out)
{
	long k = 0;
	uint32_t acc = 0;
	int bits = 0;
	size_t i;

	if (n % 4)
		return -1;
	for (i = 0; i < n; i++) {
		int d;
		if (s[i] == '=') {
			if (i < n - 2 || (i == n - 2 && s[n - 1] != '='))
				return -1;
			break;
		}
		d = b64_value((unsigned char)s[i]);
		if (d < 0)
			return -1;
		acc = acc << 6 | (uint32_t)d;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[k++] = (char)(acc >> bits);
		}
	}
	return k;
}

static const struct known_encoding {
	const char *name, *pattern;
	struct { const char *text; int32_t id; } special[6];
} known[] = {
	{ "r50k_base", "gpt2", { { "<|endoftext|>", 50256 } } },
	{ "p50k_base", "gpt2", { { "<|endoftext|>", 50256 } } },
	{ "cl100k_base", "cl100k", { { "<|endoftext|>", 100257 }, { "<|fim_prefix|>", 100258 },
				       { "<|fim_middle|>", 100259 }, { "<|fim_suffix|>", 100260 },
				       { "<|endofprompt|>", 100276 } } },
	{ "o200k_base", "o200k", { { "<|endoftext|>", 199999 }, { "<|endofprompt|>", 200018 } } },
};

int mt_vocab_load_tiktoken(struct mt_vocab *v, const char *rank_file, struct mt_err *err)
{
	struct mt_input *in = NULL;
	char *line;
	size_t len, cap = 0, used = 0;
	int64_t lineno = 0, maxrank = -1;
	struct { int64_t off; uint32_t len; int32_t rank; } *ent = NULL;
	size_t nent = 0, entcap = 0;
	char *bytes = NULL;
	const struct known_encoding *kn = NULL;
	const char *base = strrchr(rank_file, '/');
	int r, rc = -1;

	memset(v, 0, sizeof(*v));
	v->kind = MT_VOCAB_TIKTOKEN;
	v->eod = -1;
	v->ignore_merges = 1;
	base = base ? base + 1 : rank_file;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strncmp(base, known[i].name, strlen(known[i].name)) == 0)
			kn = &known[i];
	if (mt_input_open(&in, rank_file, err) || mt_input_next(in, err) < 0)
		goto out;
	while ((r = mt_input_getline(in, &line, &len, err)) == 1) {
		char *sp;
		long long rank;
		long n;

		lineno++;
		if (len && line[len - 1] == '\r')
			line[--len] = '\0';
		if (len == 0)
			continue;
		sp = memchr(line, ' ', len);
		if (!sp || parse_dec(sp + 1, &rank) || rank < 0 || rank >= INT32_MAX / 2) {
			mt_err_set(err, MT_EXIT_DATA, "tiktoken ranks '%s':%lld: expected 'BASE64 RANK'",
				   rank_file, (long long)lineno);
			goto out;
		}
		if (used + len > cap) {
			cap = (used + len) * 2;
			char *nb = realloc(bytes, cap);
			if (!nb) {
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
			bytes = nb;
		}
		n = b64_decode(line, (size_t)(sp - line), bytes + used);
		if (n <= 0) {
			mt_err_set(err, MT_EXIT_DATA, "tiktoken ranks '%s':%lld: invalid base64 token",
				   rank_file, (long long)lineno);
			goto out;
		}
		if (mt_array_grow(&ent, &entcap, nent + 1, sizeof(*ent), 65536)) {
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		ent[nent].off = (int64_t)used;
		ent[nent].len = (uint32_t)n;
		ent[nent].rank = (int32_t)rank;
		nent++;
		used += (size_t)n;
		if (rank > maxrank)
			maxrank = rank;
	}
	if (r < 0)
		goto out;
	if (nent == 0) {
		mt_err_set(err, MT_EXIT_DATA, "tiktoken ranks '%s': no tokens", rank_file);
		goto out;
	}
	{
		int32_t n = (int32_t)maxrank + 1;
		if (kn)
			for (int i = 0; i < 6 && kn->special[i].text; i++)
				if (kn->special[i].id >= n)
					n = kn->special[i].id + 1;
		if (reserve(v, n, used, err))
			goto out;
	}
	memcpy(v->arena, bytes, used);
	for (size_t i = 0; i < nent; i++) {
		int32_t id = ent[i].rank;
		if (v->len[id]) {
			mt_err_set(err, MT_EXIT_DATA, "tiktoken ranks '%s': rank %d appears twice", rank_file, id);
			goto out;
		}
		v->off[id] = ent[i].off;
		v->len[id] = ent[i].len;
		v->rank[id] = id;
	}
	if (build_table(v, rank_file, err) || build_pairs_all_splits(v, err))
		goto out;
	if (kn) {
		for (int i = 0; i < 6 && kn->special[i].text; i++)
			if (mt_vocab_add_special(v, kn->special[i].text, kn->special[i].id, err))
				goto out;
		v->pattern = strdup(kn->pattern);
		v->eod = mt_vocab_find(v, "<|endoftext|>");
	}
	v->vocab_size = v->n;
	rc = 0;
out:
	if (in)
		mt_input_close(in);
	free(ent);
	free(bytes);
	if (rc)
		mt_vocab_free(v);
	return rc;
}

/* ---- NullTokenizer ------------------------------------------------------------------------ */

int mt_vocab_init_null(struct mt_vocab *v, int64_t vocab_size, struct mt_err *err)
{
	memset(v, 0, sizeof(*v));
	if (vocab_size < 1 || vocab_size >= INT32_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "NullTokenizer needs --vocab-size between 1 and %d",
				  INT32_MAX - 1);
	v->kind = MT_VOCAB_NULL;
	v->n = (int32_t)vocab_size + 1;
	v->eod = (int32_t)vocab_size;
	v->vocab_size = vocab_size + 1;
	return 0;
}

/* ---- Hugging Face tokenizer.json (byte-level BPE) ------------------------------------------ */

static int hf_pre_tokenizer(struct mt_vocab *v, json_t *pt, const char *file, struct mt_err *err)
{
	const char *type;

	if (!pt || json_is_null(pt)) {
		return mt_err_set(err, MT_EXIT_DATA, "'%s': no pre_tokenizer; only byte-level BPE models are supported", file);
	}
	type = json_string_value(json_object_get(pt, "type"));
	if (type && strcmp(type, "ByteLevel") == 0) {
		json_t *re = json_object_get(pt, "use_regex");
		v->add_prefix_space = json_is_true(json_object_get(pt, "add_prefix_space"));
		if (!re || json_is_true(re))
			v->pattern = strdup("gpt2");
		return 0;
	}
	if (type && strcmp(type, "Sequence") == 0) {
		json_t *list = json_object_get(pt, "pretokenizers");
		size_t i;
		json_t *item;
		json_array_foreach(list, i, item) {
			const char *t = json_string_value(json_object_get(item, "type"));
			if (t && strcmp(t, "Split") == 0) {
				const char *re = json_string_value(json_object_get(json_object_get(item, "pattern"), "Regex"));
				const char *beh = json_string_value(json_object_get(item, "behavior"));
				if (!re || (beh && strcmp(beh, "Isolated") != 0) || json_is_true(json_object_get(item, "invert")) || v->pattern)
					return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': unsupported Split pre-tokenizer (supported: one Regex pattern, "
							  "behavior Isolated, not inverted)", file);
				v->pattern = strdup(re);
			} else if (t && strcmp(t, "ByteLevel") == 0) {
				if (hf_pre_tokenizer(v, item, file, err))
					return -1;
			} else {
				return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': unsupported pre-tokenizer '%s' (supported: "
						  "ByteLevel, Split with a regex, a Sequence of them)", file, t ? t : "?");
			}
		}
		return 0;
	}
	return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': unsupported pre-tokenizer '%s' (supported: ByteLevel, "
			  "Split with a regex, a Sequence of them)", file, type ? type : "?");
}

int mt_vocab_load_hf(struct mt_vocab *v, const char *tokenizer_json, const struct mt_vocab_ops *ops,
		     struct mt_err *err)
{
	json_error_t je;
	json_t *root, *model, *vocab, *merges, *added, *val, *item;
	const char *key, *type;
	json_int_t maxid = -1;
	size_t arena = 0, k = 0, i;
	char *tmp = NULL;
	int rc = -1;

	memset(v, 0, sizeof(*v));
	v->kind = MT_VOCAB_HF;
	v->ops = ops;
	v->eod = -1;
	root = json_load_file(tokenizer_json, 0, &je);
	if (!root) {
		if (je.line < 1)
			return mt_err_set(err, MT_EXIT_IO, "cannot read tokenizer '%s': %s", tokenizer_json, je.text);
		return mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s':%d:%d: %s", tokenizer_json, je.line,
				  je.column, je.text);
	}
	model = json_object_get(root, "model");
	type = json_string_value(json_object_get(model, "type"));
	vocab = json_object_get(model, "vocab");
	merges = json_object_get(model, "merges");
	added = json_object_get(root, "added_tokens");
	if (type && strcmp(type, "BPE") != 0) {
		mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': model type '%s' is not supported (only byte-level BPE)",
			   tokenizer_json, type);
		goto out;
	}
	if (!type || !json_is_object(vocab) || !json_is_array(merges)) {
		mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': not a BPE model with vocab and merges", tokenizer_json);
		goto out;
	}
	if (json_is_true(json_object_get(model, "byte_fallback"))) {
		mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': model BPE with byte_fallback (a SentencePiece-style "
			   "model, as Llama 2's) is not supported: use --tokenizer-type Llama2Tokenizer (or "
			   "GPTSentencePieceTokenizer) with its tokenizer.model", tokenizer_json);
		goto out;
	}
	v->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
	json_object_foreach(vocab, key, val) {
		if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > INT32_MAX / 2) {
			mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': token '%s' has no valid id", tokenizer_json, key);
			goto out;
		}
		if (json_integer_value(val) > maxid)
			maxid = json_integer_value(val);
		arena += strlen(key);
	}
	json_array_foreach(added, i, item) {
		json_int_t id = json_integer_value(json_object_get(item, "id"));
		if (id > maxid && id < INT32_MAX / 2)
			maxid = id;
	}
	if (maxid < 255 || reserve(v, (int32_t)maxid + 1, arena, err)) {
		if (maxid < 255)
			mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': fewer than 256 tokens", tokenizer_json);
		goto out;
	}
	tmp = malloc(arena + 1);
	if (!tmp)
		goto out;
	json_object_foreach(vocab, key, val) {
		int32_t id = (int32_t)json_integer_value(val);
		size_t n;
		if (unmap_token(key, strlen(key), tmp, &n) != 0 || n == 0)
			continue; /* not byte-level: only reachable as an added token */
		if (v->len[id]) {
			mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': id %d is used twice", tokenizer_json, id);
			goto out;
		}
		memcpy(v->arena + k, tmp, n);
		v->off[id] = (int64_t)k;
		v->len[id] = (uint32_t)n;
		k += n;
	}
	json_array_foreach(added, i, item) {
		const char *content = json_string_value(json_object_get(item, "content"));
		json_int_t id = json_integer_value(json_object_get(item, "id"));
		if (!content || id < 0 || id >= v->n)
			continue;
		/* added tokens are matched in the text before any merging, so they
		 * leave the mergeable table even when they also sit in the vocab */
		if (mt_vocab_add_special(v, content, (int32_t)id, err))
			goto out;
	}
	if (build_table(v, tokenizer_json, err))
		goto out;
	if (pairs_alloc(v, json_array_size(merges), err))
		goto out;
	json_array_foreach(merges, i, item) {
		const char *a = NULL, *b = NULL;
		char ab[2048], line[2048];
		size_t na, nb;
		int32_t ia, ib, im;

		if (json_is_string(item)) {
			const char *s = json_string_value(item), *sp = strchr(s, ' ');
			if (!sp || strlen(s) >= sizeof(line)) {
				mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': merge %zu is not 'A B'", tokenizer_json, i);
				goto out;
			}
			memcpy(line, s, strlen(s) + 1);
			line[sp - s] = '\0';
			a = line;
			b = line + (sp - s) + 1;
		} else if (json_is_array(item) && json_array_size(item) == 2) {
			a = json_string_value(json_array_get(item, 0));
			b = json_string_value(json_array_get(item, 1));
		}
		if (!a || !b || strlen(a) + strlen(b) >= sizeof(ab) / 2 ||
		    unmap_token(a, strlen(a), ab, &na) || unmap_token(b, strlen(b), ab + na, &nb)) {
			mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': merge %zu is not a pair of byte-level tokens",
				   tokenizer_json, i);
			goto out;
		}
		ia = tab_find(v, ab, na);
		ib = tab_find(v, ab + na, nb);
		im = tab_find(v, ab, na + nb);
		if (ia < 0 || ib < 0 || im < 0) {
			mt_err_set(err, MT_EXIT_DATA, "tokenizer '%s': merge %zu ('%s' '%s') uses a token missing from the vocabulary",
				   tokenizer_json, i, a, b);
			goto out;
		}
		pair_put(v, ia, ib, (int32_t)i, im);
		if (v->rank[im] < 0)
			v->rank[im] = (int32_t)i;
	}
	if (hf_pre_tokenizer(v, json_object_get(root, "pre_tokenizer"), tokenizer_json, err) ||
	    (ops && ops->load_json && ops->load_json(v, root, tokenizer_json, err)))
		goto out;
	static const char *const eods[] = { "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>" };
	for (size_t e = 0; e < sizeof(eods) / sizeof(eods[0]) && v->eod < 0; e++)
		v->eod = mt_vocab_find(v, eods[e]);
	v->vocab_size = v->n;
	rc = 0;
out:
	free(tmp);
	json_decref(root);
	if (rc)
		mt_vocab_free(v);
	return rc;
}
