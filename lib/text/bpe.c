/* bpe.c: the BPE merge loop, the piece cache and decoding (see bpe.h). */
#include "text/bpe.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"

#include "text/hfjson.h"

#define CACHE_SLOTS (1u << 14) /* per encoder, about 1.2 MiB: 94% of a 64K cache's hits */
#define CACHE_BYTES 30
#define CACHE_IDS 8
#define LINEAR_MAX 64 /* pieces up to this many bytes merge by linear scan */

struct mt_bpe_cache_slot {
	uint64_t hash;
	uint8_t len, nids;
	char bytes[CACHE_BYTES];
	int32_t ids[CACHE_IDS];
};

struct mt_bpe_heap_ent {
	int32_t rank, pos;
	uint32_t vl, vr;
};

int mt_ids_reserve(struct mt_ids *ids, size_t more)
{
	return mt_array_grow(&ids->a, &ids->cap, ids->n + more, sizeof(*ids->a), 1024);
}

void mt_ids_free(struct mt_ids *ids)
{
	free(ids->a);
	memset(ids, 0, sizeof(*ids));
}

static int scratch(struct mt_bpe *b, size_t n)
{
	size_t cap = b->cap ? b->cap : 256;

	if (n <= b->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	free(b->id), free(b->rank), free(b->merged), free(b->next), free(b->prev), free(b->ver), free(b->heap);
	b->id = malloc(cap * sizeof(int32_t));
	b->rank = malloc(cap * sizeof(int32_t));
	b->merged = malloc(cap * sizeof(int32_t));
	b->next = malloc(cap * sizeof(int32_t));
	b->prev = malloc(cap * sizeof(int32_t));
	b->ver = malloc(cap * sizeof(uint32_t));
	b->heap = malloc(cap * 3 * sizeof(struct mt_bpe_heap_ent));
	b->cap = cap;
	if (!b->id || !b->rank || !b->merged || !b->next || !b->prev || !b->ver || !b->heap) {
		b->cap = 0;
		return -1;
	}
	return 0;
}

int mt_bpe_init(struct mt_bpe *b, const struct mt_vocab *v, const struct mt_pretok *p,
		struct mt_err *err)
{
	memset(b, 0, sizeof(*b));
	b->v = v;
	b->p = p;
	if (v->kind == MT_VOCAB_NULL || v->kind == MT_VOCAB_SPM)
		return 0;
	b->cache = calloc(CACHE_SLOTS, sizeof(*b->cache));
	if (!b->cache || scratch(b, 256)) {
		mt_bpe_free(b);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (mt_pretok_iter_init(&b->it, p, err)) {
		mt_bpe_free(b);
		return -1;
	}
	if (v->kind == MT_VOCAB_HF) {
		/* added tokens, longest first so that a match is the longest at its position */
		b->added = malloc((size_t)v->n * sizeof(*b->added));
		if (!b->added) {
			mt_bpe_free(b);
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		for (int32_t id = 0; id < v->n; id++)
			if (v->special[id] && v->len[id]) {
				b->added[b->nadded++] = id;
				b->added_first[(unsigned char)v->arena[v->off[id]]] = 1;
			}
		for (int i = 1; i < b->nadded; i++)
			for (int j = i; j > 0 && v->len[b->added[j]] > v->len[b->added[j - 1]]; j--) {
				int32_t t = b->added[j];
				b->added[j] = b->added[j - 1];
				b->added[j - 1] = t;
			}
	}
	return 0;
}

void mt_bpe_free(struct mt_bpe *b)
{
	if (b->it.md)
		mt_pretok_iter_free(&b->it);
	free(b->cache);
	free(b->id), free(b->rank), free(b->merged), free(b->next), free(b->prev), free(b->ver), free(b->heap);
	free(b->prefixed);
	free(b->added);
	memset(b, 0, sizeof(*b));
}

static inline void pair_rank(const struct mt_vocab *v, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
	const struct mt_vocab_pair *p = mt_vocab_pair_get(v, a, b);

	*rank = p ? p->rank : INT32_MAX;
	*merged = p ? p->merged : -1;
}

/* Merge by linear scan: fine while n is small. Leaves the ids in b->id[0..*n). */
static void merge_linear(struct mt_bpe *b, size_t *np)
{
	const struct mt_vocab *v = b->v;
	int32_t *id = b->id, *rank = b->rank, *merged = b->merged;
	size_t n = *np;

	for (size_t i = 0; i + 1 < n; i++)
		pair_rank(v, id[i], id[i + 1], &rank[i], &merged[i]);
	while (n > 1) {
		size_t best = 0;
		int32_t r = rank[0];

		for (size_t i = 1; i + 1 < n; i++)
			if (rank[i] < r) {
				r = rank[i];
				best = i;
			}
		if (r == INT32_MAX)
			break;
		id[best] = merged[best];
		memmove(id + best + 1, id + best + 2, (n - best - 2) * sizeof(*id));
		/* pairs best+2 .. n-2 move down one */
		if (n >= best + 3) {
			memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof(*rank));
			memmove(merged + best + 1, merged + best + 2, (n - best - 3) * sizeof(*merged));
		}
		n--;
		if (best > 0)
			pair_rank(v, id[best - 1], id[best], &rank[best - 1], &merged[best - 1]);
		if (best + 1 < n)
			pair_rank(v, id[best], id[best + 1], &rank[best], &merged[best]);
	}
	*np = n;
}

static inline int heap_less(const struct mt_bpe_heap_ent *a, const struct mt_bpe_heap_ent *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct mt_bpe_heap_ent *h, size_t *n, struct mt_bpe_heap_ent e)
{
	size_t i = (*n)++;

	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!heap_less(&e, &h[up]))
			break;
		h[i] = h[up];
		i = up;
	}
	h[i] = e;
}

static struct mt_bpe_heap_ent heap_pop(struct mt_bpe_heap_ent *h, size_t *n)
{
	struct mt_bpe_heap_ent top = h[0], last = h[--(*n)];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
			c++;
		if (!heap_less(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* Push the pair starting at node i, if it merges. */
static void push_pair(struct mt_bpe *b, size_t *hn, int32_t i)
{
	int32_t j = b->next[i], r, m;
	struct mt_bpe_heap_ent e;

	if (j < 0)
		return;
	pair_rank(b->v, b->id[i], b->id[j], &r, &m);
	if (r == INT32_MAX)
		return;
	e.rank = r;
	e.pos = i;
	e.vl = b->ver[i];
	e.vr = b->ver[j];
	heap_push(b->heap, hn, e);
}

/* Merge with a heap over a linked list: O(n log n) for long pieces. Nodes keep their
 * starting position, so (rank, position) orders ties leftmost first. */
static void merge_heap(struct mt_bpe *b, size_t *np)
{
	size_t n = *np, hn = 0, k = 0;
	int32_t i;

	for (size_t q = 0; q < n; q++) {
		b->next[q] = q + 1 < n ? (int32_t)q + 1 : -1;
		b->prev[q] = (int32_t)q - 1;
		b->ver[q] = 0;
	}
	for (size_t q = 0; q + 1 < n; q++)
		push_pair(b, &hn, (int32_t)q);
	while (hn) {
		struct mt_bpe_heap_ent e = heap_pop(b->heap, &hn);
		int32_t l = e.pos, r = b->next[l], m, rk;

		if (r < 0 || b->ver[l] != e.vl || b->ver[r] != e.vr)
			continue; /* stale: one side changed since this entry was pushed */
		pair_rank(b->v, b->id[l], b->id[r], &rk, &m);
		b->id[l] = m;
		b->next[l] = b->next[r];
		if (b->next[r] >= 0)
			b->prev[b->next[r]] = l;
		b->ver[l]++;
		b->ver[r]++;
		if (b->prev[l] >= 0)
			push_pair(b, &hn, b->prev[l]);
		push_pair(b, &hn, l);
	}
	for (i = 0; i >= 0; i = b->next[i])
		b->id[k++] = b->id[i];
	*np = k;
}

/* One piece: the cache first (it holds whole-token pieces too), then a whole-piece
 * lookup where the vocabulary asks for it, then the merge loop. */
static int encode_piece(struct mt_bpe *b, const char *s, size_t n, struct mt_ids *out)
{
	const struct mt_vocab *v = b->v;
	struct mt_bpe_cache_slot *slot = NULL;
	uint64_t h;
	size_t k;

	if (n == 1 && !v->ignore_merges)
		return mt_ids_push(out, v->byte_id[(unsigned char)s[0]]);
	h = mt_vocab_hash(s, n);
	if (n <= CACHE_BYTES) {
		slot = &b->cache[h & (CACHE_SLOTS - 1)];
		if (slot->hash == h && slot->len == n && memcmp(slot->bytes, s, n) == 0) {
			if (mt_ids_reserve(out, slot->nids))
				return -1;
			memcpy(out->a + out->n, slot->ids, slot->nids * sizeof(int32_t));
			out->n += slot->nids;
			return 0;
		}
	}
	k = 0;
	if (v->ignore_merges) {
		int32_t id = mt_vocab_lookup_hashed(v, s, n, h);
		if (id >= 0) {
			b->id[0] = id;
			k = 1;
		}
	}
	if (!k) {
		if (scratch(b, n))
			return -1;
		for (size_t i = 0; i < n; i++)
			b->id[i] = v->byte_id[(unsigned char)s[i]];
		k = n;
		if (n <= LINEAR_MAX)
			merge_linear(b, &k);
		else
			merge_heap(b, &k);
	}
	if (mt_ids_reserve(out, k))
		return -1;
	memcpy(out->a + out->n, b->id, k * sizeof(int32_t));
	out->n += k;
	if (slot && k <= CACHE_IDS) {
		slot->hash = h;
		slot->len = (uint8_t)n;
		slot->nids = (uint8_t)k;
		memcpy(slot->bytes, s, n);
		memcpy(slot->ids, b->id, k * sizeof(int32_t));
	}
	return 0;
}

static int encode_null(struct mt_bpe *b, const char *s, size_t n, struct mt_ids *out, struct mt_err *err)
{
	size_t i = 0;

	while (i < n) {
		int64_t val = 0;
		size_t start;

		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
			i++;
		if (i == n)
			break;
		start = i;
		while (i < n && s[i] >= '0' && s[i] <= '9' && val < INT32_MAX)
			val = val * 10 + (s[i++] - '0');
		if (i == start || (i < n && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r'))
			return mt_err_set(err, MT_EXIT_DATA, "NullTokenizer: '%.*s' is not a token id",
					  (int)(i - start + 1 < 32 ? i - start + 1 : 32), s + start);
		if (val >= b->v->vocab_size)
			return mt_err_set(err, MT_EXIT_DATA, "NullTokenizer: id %lld is not below the vocabulary size %lld",
					  (long long)val, (long long)b->v->vocab_size);
		if (mt_ids_push(out, (int32_t)val))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	return 0;
}

static int encode_plain(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out,
			struct mt_err *err);
static int encode_hf(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out, struct mt_err *err);

/* Split the text at added tokens (leftmost match, longest there) and encode between. */
static int encode_added(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out,
			struct mt_err *err)
{
	const struct mt_vocab *v = b->v;
	size_t start = 0;

	for (size_t i = 0; i < n; i++) {
		if (!b->added_first[(unsigned char)text[i]])
			continue;
		for (int k = 0; k < b->nadded; k++) {
			int32_t id = b->added[k];
			size_t len = v->len[id];
			if (len <= n - i && memcmp(text + i, v->arena + v->off[id], len) == 0) {
				if (i > start && encode_plain(b, text + start, i - start, out, err))
					return -1;
				if (mt_ids_push(out, id))
					return mt_err_set(err, MT_EXIT_IO, "out of memory");
				start = i + len;
				i = start - 1;
				break;
			}
		}
	}
	return start < n ? encode_plain(b, text + start, n - start, out, err) : 0;
}

int mt_bpe_encode(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out,
		  struct mt_err *err)
{
	if (b->v->kind == MT_VOCAB_NULL)
		return encode_null(b, text, n, out, err);
	if (b->v->ops && b->v->ops->encode)
		return b->v->ops->encode(b->v, text, n, &out->a, &out->n, &out->cap, err);
	if (b->v->hf.nnorm || b->v->hf.npre || b->v->hf.npost)
		return encode_hf(b, text, n, out, err);
	if (b->nadded)
		return encode_added(b, text, n, out, err);
	return encode_plain(b, text, n, out, err);
}

/* tokenizer.json with a normalizer or a post-processor that adds ids: the template's
 * ids before, the normalized text's ids, the template's ids after */
static int encode_hf(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out, struct mt_err *err)
{
	const struct mt_hf_extra *x = &b->v->hf;
	char *norm = NULL;
	size_t nn;
	int rc;

	for (int i = 0; i < x->npre; i++)
		if (mt_ids_push(out, x->pre[i]))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (x->nnorm) {
		if (mt_hfjson_normalize(b->v, text, n, &norm, &nn, err))
			return -1;
		text = norm;
		n = nn;
	}
	rc = b->nadded ? encode_added(b, text, n, out, err) : encode_plain(b, text, n, out, err);
	free(norm);
	if (rc)
		return -1;
	for (int i = 0; i < x->npost; i++)
		if (mt_ids_push(out, x->post[i]))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
	return 0;
}

static int encode_plain(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out,
			struct mt_err *err)
{
	size_t s, e;

	if (b->v->add_prefix_space && n > 0 && text[0] != ' ') {
		if (b->prefixed_cap < n + 1) {
			char *p = realloc(b->prefixed, n + 1);
			if (!p)
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			b->prefixed = p;
			b->prefixed_cap = n + 1;
		}
		b->prefixed[0] = ' ';
		memcpy(b->prefixed + 1, text, n);
		text = b->prefixed;
		n++;
	}
	mt_pretok_iter_reset(&b->it, text, n);
	while (mt_pretok_iter_next(&b->it, &s, &e))
		if (encode_piece(b, text + s, e - s, out))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
	return 0;
}

int mt_bpe_decode(const struct mt_vocab *v, const int32_t *ids, size_t n, char **buf,
		  size_t *len, size_t *cap, struct mt_err *err)
{
	if (v->ops && v->ops->decode)
		return v->ops->decode(v, ids, n, buf, len, cap, err);
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		char tmp[16];
		const char *src;
		size_t sl;

		if (id < 0 || id >= v->n || (v->kind != MT_VOCAB_NULL && v->len[id] == 0))
			return mt_err_set(err, MT_EXIT_DATA, "token id %d is not in the vocabulary", id);
		if (v->kind == MT_VOCAB_NULL) {
			sl = (size_t)snprintf(tmp, sizeof(tmp), "%s%d", *len ? " " : "", id);
			src = tmp;
		} else {
			src = v->arena + v->off[id];
			sl = v->len[id];
		}
		if (*len + sl + 1 > *cap) {
			size_t nc = (*cap ? *cap : 4096);
			char *nb;
			while (nc < *len + sl + 1)
				nc *= 2;
			nb = realloc(*buf, nc);
			if (!nb)
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			*buf = nb;
			*cap = nc;
		}
		memcpy(*buf + *len, src, sl);
		*len += sl;
		(*buf)[*len] = '\0';
	}
	return 0;
}
