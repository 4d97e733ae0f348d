/* bpetrain.c: BPE training with incremental pair counts (see bpetrain.h).
 *
 * Words are the distinct pieces with their counts, each an array of symbol ids. A
 * table maps each adjacent pair to its total count and the words it occurs in; a max-
 * heap with lazy deletion yields the best pair. Merging rewrites only the words that
 * hold the pair and adjusts the counts of the pairs around each occurrence. */
#include "text/bpetrain.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic.h"
#include "base/input.h"
#include "base/jsontext.h"
#include "base/log.h"
#include "text/pretok.h"
#include "base/progress.h"
#include "base/utf8.h"
#include "text/vocab.h"

/* ---- distinct pieces -------------------------------------------------------------------- */

struct pieces {
	char *arena;
	size_t used, cap;
	struct pslot { int64_t off, count; uint32_t len; uint32_t used; } *tab;
	uint64_t mask, n;
};

static uint64_t hbytes(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

static int pieces_grow(struct pieces *p)
{
	uint64_t ncap = p->mask ? (p->mask + 1) * 2 : 1 << 16;
	struct pslot *nt = calloc(ncap, sizeof(*nt));

	if (!nt)
		return -1;
	for (uint64_t i = 0; p->tab && i <= p->mask; i++) {
		struct pslot *s = &p->tab[i];
		uint64_t j;
		if (!s->used)
			continue;
		j = hbytes(p->arena + s->off, s->len) & (ncap - 1);
		while (nt[j].used)
			j = (j + 1) & (ncap - 1);
		nt[j] = *s;
	}
	free(p->tab);
	p->tab = nt;
	p->mask = ncap - 1;
	return 0;
}

static int pieces_add(struct pieces *p, const char *s, size_t n)
{
	uint64_t i;

	if ((p->n + 1) * 2 > p->mask + 1 && pieces_grow(p))
		return -1;
	i = hbytes(s, n) & p->mask;
	for (;;) {
		struct pslot *e = &p->tab[i];
		if (!e->used)
			break;
		if (e->len == n && memcmp(p->arena + e->off, s, n) == 0) {
			e->count++;
			return 0;
		}
		i = (i + 1) & p->mask;
	}
	if (p->used + n > p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 1 << 20;
		char *na;
		while (cap < p->used + n)
			cap *= 2;
		na = realloc(p->arena, cap);
		if (!na)
			return -1;
		p->arena = na;
		p->cap = cap;
	}
	memcpy(p->arena + p->used, s, n);
	p->tab[i] = (struct pslot){ (int64_t)p->used, 1, (uint32_t)n, 1 };
	p->used += n;
	p->n++;
	return 0;
}

/* ---- pairs ------------------------------------------------------------------------------- */

struct pairinfo {
	uint64_t key;      /* (a << 32 | b) + 1; 0 = empty */
	int64_t count;
	int32_t *words;    /* words holding the pair (may repeat, may be stale) */
	int32_t nw, cw;
};

struct trainer {
	/* words */
	int32_t *sym;      /* all words' symbols, each word at woff[w], length wlen[w] */
	int64_t *woff;
	int32_t *wlen;
	int64_t *wcount;
	int64_t nwords;
	/* pairs */
	struct pairinfo *pairs;
	uint64_t pmask, npairs;
	/* heap of (count, pair key) */
	struct hent { int64_t count; uint64_t key; } *heap;
	size_t hn, hcap;
	/* pairs whose count rose during the current merge */
	uint64_t *touched;
	size_t ntouched, ctouched;
	/* symbol bytes */
	char **sbytes;
	uint32_t *slen;
	int32_t nsym, symcap;
};

static uint64_t pkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static struct pairinfo *pair_get(struct trainer *t, uint64_t key, int create)
{
	uint64_t h = key * 0x9E3779B97F4A7C15ull, i;

	if (create && (t->npairs + 1) * 2 > t->pmask + 1) {
		uint64_t ncap = t->pmask ? (t->pmask + 1) * 2 : 1 << 16;
		struct pairinfo *np = calloc(ncap, sizeof(*np));
		if (!np)
			return NULL;
		for (uint64_t k = 0; t->pairs && k <= t->pmask; k++) {
			uint64_t j;
			if (!t->pairs[k].key)
				continue;
			j = ((t->pairs[k].key * 0x9E3779B97F4A7C15ull) >> 20) & (ncap - 1);
			while (np[j].key)
				j = (j + 1) & (ncap - 1);
			np[j] = t->pairs[k];
		}
		free(t->pairs);
		t->pairs = np;
		t->pmask = ncap - 1;
	}
	if (!t->pairs)
		return NULL;
	i = (h >> 20) & t->pmask;
	for (;;) {
		struct pairinfo *p = &t->pairs[i];
		if (p->key == key)
			return p;
		if (!p->key) {
			if (!create)
				return NULL;
			p->key = key;
			t->npairs++;
			return p;
		}
		i = (i + 1) & t->pmask;
	}
}

static int hless(const struct hent *a, const struct hent *b)
{
	/* max-heap on count; on ties the smaller pair key first */
	return a->count > b->count || (a->count == b->count && a->key < b->key);
}

static int heap_push(struct trainer *t, int64_t count, uint64_t key)
{
	size_t i;

	if (t->hn == t->hcap) {
		size_t cap = t->hcap ? t->hcap * 2 : 1 << 16;
		struct hent *nh = realloc(t->heap, cap * sizeof(*nh));
		if (!nh)
			return -1;
		t->heap = nh;
		t->hcap = cap;
	}
	i = t->hn++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		struct hent e = { count, key };
		if (!hless(&e, &t->heap[up]))
			break;
		t->heap[i] = t->heap[up];
		i = up;
	}
	t->heap[i] = (struct hent){ count, key };
	return 0;
}

static struct hent heap_pop(struct trainer *t)
{
	struct hent top = t->heap[0], last = t->heap[--t->hn];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= t->hn)
			break;
		if (c + 1 < t->hn && hless(&t->heap[c + 1], &t->heap[c]))
			c++;
		if (!hless(&t->heap[c], &last))
			break;
		t->heap[i] = t->heap[c];
		i = c;
	}
	if (t->hn)
		t->heap[i] = last;
	return top;
}

static int pair_add(struct trainer *t, int32_t a, int32_t b, int64_t delta, int32_t word)
{
	struct pairinfo *p = pair_get(t, pkey(a, b), 1);

	if (!p)
		return -1;
	p->count += delta;
	if (delta > 0 && word >= 0) {
		if (t->ntouched == t->ctouched) {
			size_t cap = t->ctouched ? t->ctouched * 2 : 1024;
			uint64_t *nt = realloc(t->touched, cap * sizeof(*nt));
			if (!nt)
				return -1;
			t->touched = nt;
			t->ctouched = cap;
		}
		t->touched[t->ntouched++] = p->key;
		if (p->nw == p->cw) {
			int32_t cap = p->cw ? p->cw * 2 : 4;
			int32_t *nw = realloc(p->words, (size_t)cap * sizeof(*nw));
			if (!nw)
				return -1;
			p->words = nw;
			p->cw = cap;
		}
		p->words[p->nw++] = word;
	}
	return 0;
}

static int new_symbol(struct trainer *t, int32_t a, int32_t b)
{
	char *s;

	if (t->nsym == t->symcap) {
		int32_t cap = t->symcap * 2;
		char **nb = realloc(t->sbytes, (size_t)cap * sizeof(*nb));
		uint32_t *nl;
		if (!nb)
			return -1;
		t->sbytes = nb;
		nl = realloc(t->slen, (size_t)cap * sizeof(*nl));
		if (!nl)
			return -1;
		t->slen = nl;
		t->symcap = cap;
	}
	s = malloc(t->slen[a] + t->slen[b]);
	if (!s)
		return -1;
	memcpy(s, t->sbytes[a], t->slen[a]);
	memcpy(s + t->slen[a], t->sbytes[b], t->slen[b]);
	t->sbytes[t->nsym] = s;
	t->slen[t->nsym] = t->slen[a] + t->slen[b];
	return t->nsym++;
}

/* Replace (a, b) by m in word w, adjusting neighbouring pair counts. */
static int merge_word(struct trainer *t, int32_t w, int32_t a, int32_t b, int32_t m)
{
	int32_t *s = t->sym + t->woff[w];
	int32_t n = t->wlen[w], k = 0;
	int64_t c = t->wcount[w];

	for (int32_t i = 0; i < n;) {
		if (i + 1 < n && s[i] == a && s[i + 1] == b) {
			if (pair_add(t, a, b, -c, -1))
				return -1;
			if (k > 0 && (pair_add(t, s[k - 1], a, -c, -1) || pair_add(t, s[k - 1], m, c, w)))
				return -1;
			if (i + 2 < n && (pair_add(t, b, s[i + 2], -c, -1) || pair_add(t, m, s[i + 2], c, w)))
				return -1;
			s[k++] = m;
			i += 2;
		} else {
			s[k++] = s[i++];
		}
	}
	t->wlen[w] = k;
	return 0;
}

static int read_corpus(const struct mt_bpetrain_opts *o, const struct mt_pretok *pt, struct pieces *pc,
		       int64_t *docs, struct mt_err *err)
{
	struct mt_pretok_iter it;
	char *fix = NULL;
	size_t fixcap = 0;
	int rc = -1;
	struct mt_jsontext jt = { 0 };
	struct mt_input *in = NULL;

	if (mt_pretok_iter_init(&it, pt, err))
		return -1;
	for (int i = 0; i < o->ninputs; i++) {
		int r;

		if (mt_input_open(&in, o->inputs[i], err))
			goto out;
		while ((r = mt_input_next(in, err)) == 1) {
			char *line;
			size_t len;
			int64_t lineno = 0;

			while ((r = mt_input_getline(in, &line, &len, err)) == 1) {
				int np = 1;

				lineno++;
				if (!o->text) {
					/* the same record parsing as mt-tokenize's workers */
					if (strspn(line, " \t\r") == len)
						continue;
					if (mt_jsontext_parse(&jt, line, len, &o->key, 1, err)) {
						mt_err_prefix(err, "'%s':%lld", mt_input_member(in), (long long)lineno);
						goto out;
					}
					np = jt.count[0];
					if (np < 0) {
						mt_err_set(err, MT_EXIT_DATA, "'%s':%lld: key '%s' %s", mt_input_member(in),
							   (long long)lineno, o->key,
							   np == MT_JSONTEXT_MISSING ? "not found" : "is neither a string nor a list of strings");
						goto out;
					}
				}
				for (int k = 0; k < np; k++) {
					const char *s = o->text ? line : jt.buf + jt.off[jt.first[0] + k];
					size_t n = o->text ? len : jt.len[jt.first[0] + k], b, e;
					if (mt_utf8_valid_prefix(s, n) < n) {
						size_t rep;
						if (fixcap < 3 * n + 1) {
							free(fix);
							fix = malloc(fixcap = 3 * n + 1);
							if (!fix) {
								mt_err_set(err, MT_EXIT_IO, "out of memory");
								goto out;
							}
						}
						n = mt_utf8_repair(s, n, fix, &rep);
						s = fix;
					}
					mt_pretok_iter_reset(&it, s, n);
					while (mt_pretok_iter_next(&it, &b, &e))
						if (pieces_add(pc, s + b, e - b)) {
							mt_err_set(err, MT_EXIT_IO, "out of memory");
							goto out;
						}
				}
				(*docs)++;
			}
			if (r < 0)
				break;
		}
		mt_input_close(in);
		in = NULL;
		if (r < 0)
			goto out;
	}
	rc = 0;
out:
	if (in)
		mt_input_close(in);
	free(fix);
	mt_jsontext_free(&jt);
	mt_pretok_iter_free(&it);
	return rc;
}

/* GPT-2's byte order: the printable bytes first, as bytes_to_unicode lists them. */
static void byte_order(int order[256])
{
	int k = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int b = 0; b < 256; b++) {
			int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
			if (keep == (pass == 0))
				order[k++] = b;
		}
}

static size_t mapped(const char *s, uint32_t n, char *out)
{
	size_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t cp = mt_vocab_byte_to_cp((uint8_t)s[i]);
		if (cp < 0x80) {
			out[k++] = (char)cp;
		} else {
			out[k++] = (char)(0xC0 | (cp >> 6));
			out[k++] = (char)(0x80 | (cp & 0x3F));
		}
	}
	out[k] = '\0';
	return k;
}

static int write_outputs(const struct mt_bpetrain_opts *o, struct trainer *t, const int32_t *ma,
			 const int32_t *mb, int64_t nmerges, struct mt_err *err)
{
	char path[4096], *buf = malloc(4096), *dump;
	size_t bufcap = 4096;
	json_t *vocab = json_object();
	struct mt_atomic w;
	int order[256], rc = -1;
	int32_t *idof = malloc((size_t)t->nsym * sizeof(*idof)), next = 256;

	if (!buf || !vocab || !idof) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	byte_order(order);
	for (int i = 0; i < 256; i++)
		idof[order[i]] = i; /* symbol b (a byte) gets GPT-2's id for it */
	for (int32_t s = 256; s < t->nsym; s++)
		idof[s] = -1;
	for (int i = 0; i < 256; i++) {
		int b = order[i];
		char key[8];
		mapped((char *)&(char){ (char)b }, 1, key);
		json_object_set_new(vocab, key, json_integer(i));
	}
	/* merged symbols in merge order; a symbol whose bytes exist already keeps the old id */
	for (int64_t m = 0; m < nmerges; m++) {
		int32_t s = 256 + (int32_t)m;
		if (2 * (size_t)t->slen[s] + 1 > bufcap) {
			bufcap = 2 * (size_t)t->slen[s] + 1;
			free(buf);
			buf = malloc(bufcap);
			if (!buf)
				goto out;
		}
		mapped(t->sbytes[s], t->slen[s], buf);
		if (json_object_get(vocab, buf))
			continue;
		json_object_set_new(vocab, buf, json_integer(next));
		idof[s] = next++;
	}
	json_object_set_new(vocab, "<|endoftext|>", json_integer(next));
	dump = json_dumps(vocab, JSON_COMPACT);
	if (!dump) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	snprintf(path, sizeof(path), "%s-vocab.json", o->output_prefix);
	if (mt_atomic_open(&w, path, err)) {
		free(dump);
		goto out;
	}
	if (mt_atomic_write(&w, dump, strlen(dump), err) || mt_atomic_write(&w, "\n", 1, err) ||
	    mt_atomic_commit(&w, err)) {
		mt_atomic_abort(&w);
		free(dump);
		goto out;
	}
	free(dump);
	snprintf(path, sizeof(path), "%s-merges.txt", o->output_prefix);
	if (mt_atomic_open(&w, path, err))
		goto out;
	fprintf(mt_atomic_file(&w), "#version: 0.2\n");
	for (int64_t m = 0; m < nmerges; m++) {
		size_t need = 2 * ((size_t)t->slen[ma[m]] + t->slen[mb[m]]) + 4;
		if (need > bufcap) {
			free(buf);
			buf = malloc(bufcap = need);
			if (!buf)
				goto out;
		}
		size_t k = mapped(t->sbytes[ma[m]], t->slen[ma[m]], buf);
		buf[k++] = ' ';
		k += mapped(t->sbytes[mb[m]], t->slen[mb[m]], buf + k);
		buf[k++] = '\n';
		if (mt_atomic_write(&w, buf, k, err)) {
			mt_atomic_abort(&w);
			goto out;
		}
	}
	if (mt_atomic_commit(&w, err))
		goto out;
	rc = 0;
out:
	free(buf);
	free(idof);
	json_decref(vocab);
	return rc;
}

int mt_bpetrain_run(const struct mt_bpetrain_opts *o, struct mt_bpetrain_stats *st,
		    struct mt_err *err)
{
	struct mt_pretok pt;
	struct pieces pc = { 0 };
	struct trainer t = { 0 };
	int32_t *ma = NULL, *mb = NULL;
	int64_t want = o->vocab_size - 257, nm = 0;
	double t0 = mt_now();
	int rc = -1;

	memset(st, 0, sizeof(*st));
	if (mt_pretok_compile(&pt, o->pattern, err))
		return -1;
	if (read_corpus(o, &pt, &pc, &st->documents, err))
		goto out;
	st->pieces = (int64_t)pc.n;
	/* words from pieces, in a fixed order (by first appearance in the arena) */
	t.nwords = (int64_t)pc.n;
	t.woff = malloc((size_t)(t.nwords + 1) * sizeof(*t.woff));
	t.wlen = malloc((size_t)(t.nwords + 1) * sizeof(*t.wlen));
	t.wcount = malloc((size_t)(t.nwords + 1) * sizeof(*t.wcount));
	t.sym = malloc((pc.used + 1) * sizeof(*t.sym));
	t.symcap = 1024;
	t.sbytes = malloc((size_t)t.symcap * sizeof(*t.sbytes));
	t.slen = malloc((size_t)t.symcap * sizeof(*t.slen));
	ma = malloc((size_t)(want > 0 ? want : 1) * sizeof(*ma));
	mb = malloc((size_t)(want > 0 ? want : 1) * sizeof(*mb));
	if (!t.woff || !t.wlen || !t.wcount || !t.sym || !t.sbytes || !t.slen || !ma || !mb) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	for (int b = 0; b < 256; b++) {
		t.sbytes[b] = malloc(1);
		if (!t.sbytes[b])
			goto out;
		t.sbytes[b][0] = (char)b;
		t.slen[b] = 1;
	}
	t.nsym = 256;
	{
		int64_t w = 0;
		for (uint64_t i = 0; i <= pc.mask; i++) {
			struct pslot *s = &pc.tab[i];
			if (!s->used)
				continue;
			t.woff[w] = s->off; /* symbols sit at the same offsets as the bytes */
			t.wlen[w] = (int32_t)s->len;
			t.wcount[w] = s->count;
			for (uint32_t k = 0; k < s->len; k++)
				t.sym[s->off + k] = (unsigned char)pc.arena[s->off + k];
			w++;
		}
	}
	for (int64_t w = 0; w < t.nwords; w++) {
		int32_t *s = t.sym + t.woff[w];
		for (int32_t k = 0; k + 1 < t.wlen[w]; k++)
			if (pair_add(&t, s[k], s[k + 1], t.wcount[w], (int32_t)w)) {
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
	}
	for (uint64_t i = 0; i <= t.pmask && t.pairs; i++)
		if (t.pairs[i].key && t.pairs[i].count > 0 && heap_push(&t, t.pairs[i].count, t.pairs[i].key))
			goto out;
	t.ntouched = 0;
	while (nm < want && t.hn) {
		struct hent top = heap_pop(&t);
		struct pairinfo *p = pair_get(&t, top.key, 0);
		int32_t a, b, m, nw, *words;

		if (!p || p->count != top.count) {
			if (p && p->count > 0 && p->count < top.count && heap_push(&t, p->count, p->key))
				goto out;
			continue; /* stale entry */
		}
		if (p->count < o->min_frequency)
			break;
		a = (int32_t)((top.key - 1) >> 32);
		b = (int32_t)((top.key - 1) & 0xffffffffu);
		m = new_symbol(&t, a, b);
		if (m < 0) {
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		ma[nm] = a;
		mb[nm] = b;
		nm++;
		/* detach the word list: merging adds to other pairs' lists, maybe this table grows */
		words = p->words;
		nw = p->nw;
		p->words = NULL;
		p->nw = p->cw = 0;
		for (int32_t i = 0; i < nw; i++) {
			int32_t w = words[i];
			if (i > 0 && words[i - 1] == w)
				continue; /* listed twice in a row */
			if (merge_word(&t, w, a, b, m)) {
				free(words);
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
		}
		free(words);
		/* pairs that gained count around the merges go (back) on the heap */
		for (size_t i = 0; i < t.ntouched; i++) {
			struct pairinfo *q = pair_get(&t, t.touched[i], 0);
			if (q && q->count > 0 && heap_push(&t, q->count, q->key))
				goto out;
		}
		t.ntouched = 0;
		if ((nm & 1023) == 0)
			mt_debug("%lld merges", (long long)nm);
	}
	st->merges = nm;
	if (write_outputs(o, &t, ma, mb, nm, err))
		goto out;
	rc = 0;
out:
	mt_pretok_free(&pt);
	free(pc.arena);
	free(pc.tab);
	for (uint64_t i = 0; t.pairs && i <= t.pmask; i++)
		free(t.pairs[i].words);
	free(t.pairs);
	free(t.heap);
	free(t.touched);
	for (int32_t s = 0; s < t.nsym; s++)
		free(t.sbytes[s]);
	free(t.sbytes);
	free(t.slen);
	free(t.sym);
	free(t.woff);
	free(t.wlen);
	free(t.wcount);
	free(ma);
	free(mb);
	st->seconds = mt_now() - t0;
	return rc;
}
