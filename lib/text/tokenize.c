/* tokenize.c: reader thread, worker threads and the ordered writer (see tokenize.h). */
#include "text/tokenize.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/bpe.h"
#include "data/idx.h"
#include "base/array.h"
#include "base/input.h"
#include "base/jsontext.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/utf8.h"

/* Batch size and pool depth; -D overrides them for experiments (docs/perf-log.md: 1 MiB
 * batches or a pool of 6 per worker did not run faster at 16 workers). */
#ifndef BATCH_BYTES
#define BATCH_BYTES (256 << 10)
#endif
#define BATCH_RECORDS 8192
#define SHRINK_BYTES (4 * BATCH_BYTES) /* a batch's buffers above this are freed on reuse */
#ifndef POOL_PER_WORKER
#define POOL_PER_WORKER 2 /* batches in the pool per worker, plus two */
#endif

struct rec {
	size_t off, len;
	const char *origin; /* "file" or "archive:member"; owned by the reader, stable */
	int64_t line;  /* first line of the record, 1-based */
};

struct key_out {
	struct mt_ids toks;
	int32_t *lens;       /* sequence lengths, end to end */
	size_t nlens, lcap;
	int32_t *nseq;       /* sequences per document */
	size_t ndoc, dcap;
};

struct __attribute__((aligned(128))) batch {
	int64_t seq;
	char *buf;
	size_t len, cap;
	struct rec *recs;
	int nrec, reccap;
	int64_t consumed;    /* input bytes consumed when the batch was cut */
	int done;
	/* results */
	struct key_out out[MT_TOK_MAX_KEYS];
	int64_t good, bad, repaired, empty;
	int64_t text;          /* bytes of document text tokenized (JSON decoded; what MB/s counts) */
	int failed;
	struct mt_err err;
};

struct pipe {
	const struct mt_tokenize_opts *o;
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_done, cv_free;
	struct batch *pool;
	int nslots;
	int64_t produced, consumed; /* batches handed to workers, written by the writer */
	int64_t next_work;          /* next batch a worker takes */
	int reader_done, stop;
	struct mt_err reader_err;
	int reader_failed;
	char **origins;
	int norigins, origcap;
	int64_t total_size;
	int warned;                 /* bad records reported so far (the first 10 are) */
	size_t max_doc;             /* bytes of one record at most */
	int64_t too_long;           /* records skipped by the reader for their size */
	/* where the time went, for -vv: the reader's wait for a free slot, its CPU time */
	double reader_blocked, reader_cpu;
};

static double thread_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- reader ---------------------------------------------------------------------------- */

static struct batch *slot(struct pipe *p, int64_t seq) { return &p->pool[seq % p->nslots]; }

/* Wait for a free slot and start batch `p->produced` in it. */
static struct batch *begin_batch(struct pipe *p)
{
	struct batch *b;

	pthread_mutex_lock(&p->mu);
	if (!p->stop && p->produced - p->consumed >= p->nslots) {
		double t = mt_now();
		while (!p->stop && p->produced - p->consumed >= p->nslots)
			pthread_cond_wait(&p->cv_free, &p->mu);
		p->reader_blocked += mt_now() - t;
	}
	if (p->stop) {
		pthread_mutex_unlock(&p->mu);
		return NULL;
	}
	b = slot(p, p->produced);
	pthread_mutex_unlock(&p->mu);
	if (b->cap > SHRINK_BYTES) { /* grown for a long record: give it back */
		free(b->buf);
		b->buf = NULL;
		b->cap = 0;
	}
	for (int k = 0; k < MT_TOK_MAX_KEYS; k++)
		if (b->out[k].toks.cap * sizeof(int32_t) > SHRINK_BYTES)
			mt_ids_free(&b->out[k].toks);
	b->seq = p->produced;
	b->len = 0;
	b->nrec = 0;
	b->done = 0;
	return b;
}

static void submit_batch(struct pipe *p, struct batch *b, int64_t consumed)
{
	b->consumed = consumed;
	pthread_mutex_lock(&p->mu);
	p->produced++;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
}

static int add_record(struct batch *b, const char *s, size_t n, const char *origin, int64_t line)
{
	if (mt_array_grow(&b->buf, &b->cap, b->len + n, 1, BATCH_BYTES + 4096))
		return -1;
	if (b->nrec == b->reccap) {
		int cap = b->reccap ? b->reccap * 2 : 1024;
		struct rec *nr = realloc(b->recs, (size_t)cap * sizeof(*nr));
		if (!nr)
			return -1;
		b->recs = nr;
		b->reccap = cap;
	}
	memcpy(b->buf + b->len, s, n);
	b->recs[b->nrec].off = b->len;
	b->recs[b->nrec].len = n;
	b->recs[b->nrec].origin = origin;
	b->recs[b->nrec].line = line;
	b->nrec++;
	b->len += n;
	return 0;
}

static int is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

/* The name of the member being read, kept until the end (records point to it). */
static const char *new_origin(struct pipe *p, struct mt_input *in)
{
	char name[4096];

	if (mt_input_is_archive(in))
		snprintf(name, sizeof(name), "%s:%s", mt_input_name(in), mt_input_member(in));
	else
		snprintf(name, sizeof(name), "%s", mt_input_name(in));
	if (p->norigins == p->origcap) {
		int cap = p->origcap ? p->origcap * 2 : 16;
		char **no = realloc(p->origins, (size_t)cap * sizeof(*no));
		if (!no)
			return NULL;
		p->origins = no;
		p->origcap = cap;
	}
	p->origins[p->norigins] = strdup(name);
	return p->origins[p->norigins] ? p->origins[p->norigins++] : NULL;
}

/* Read one member into batches. *bp is the batch being filled. */
static int read_member(struct pipe *p, struct mt_input *in, struct batch **bp, int64_t base,
		       struct mt_err *err)
{
	const struct mt_tokenize_opts *o = p->o;
	const char *origin = new_origin(p, in);
	char *line, *para = NULL;
	size_t len, plen = 0, pcap = 0;
	int64_t lineno = 0, pline = 0;
	int r = 0;

	if (!origin)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	mt_input_set_max_line(in, p->max_doc);
#define FLUSH_IF_FULL()                                                                          \
	do {                                                                                     \
		if ((*bp)->len >= BATCH_BYTES || (*bp)->nrec >= BATCH_RECORDS) {                 \
			submit_batch(p, *bp, base + mt_input_consumed(in));                      \
			if (!(*bp = begin_batch(p)))                                             \
				goto stopped;                                                    \
		}                                                                                \
	} while (0)
/* a record over the cap: an error naming where it starts, or skipped with a warning */
#define TOO_LONG(n, l)                                                                           \
	do {                                                                                     \
		if (!o->skip_bad_lines) {                                                        \
			r = mt_err_set(err, MT_EXIT_DATA,                                        \
				       "'%s':%lld: a document of %s%zu bytes, over the limit of %zu " \
				       "(raise --max-document-bytes to tokenize it whole)",       \
				       origin, (long long)(l), o->format == MT_TOK_TEXT_PARA ? "" : "at least ", \
				       (size_t)(n), p->max_doc);                                 \
			goto out;                                                                \
		}                                                                                \
		p->too_long++;                                                                   \
		if (__atomic_fetch_add(&p->warned, 1, __ATOMIC_RELAXED) < 10)                    \
			mt_warn("skipping '%s':%lld: a document of %zu bytes or more, over the limit of %zu", \
				origin, (long long)(l), (size_t)(n), p->max_doc);                \
	} while (0)
#define ADD(s, n, l)                                                                             \
	do {                                                                                     \
		if (add_record(*bp, s, n, origin, l)) {                                          \
			r = mt_err_set(err, MT_EXIT_IO, "out of memory");                        \
			goto out;                                                                \
		}                                                                                \
		FLUSH_IF_FULL();                                                                 \
	} while (0)

	if (o->format == MT_TOK_TEXT_FILE) {
		/* the whole member is one document */
		ssize_t got;
		for (;;) {
			if (plen + 65536 > pcap) {
				char *np = realloc(para, pcap = (pcap ? pcap * 2 : 1 << 20));
				if (!np) {
					r = mt_err_set(err, MT_EXIT_IO, "out of memory");
					goto out;
				}
				para = np;
			}
			got = mt_input_read(in, para + plen, pcap - plen, err);
			if (got < 0) {
				r = -1;
				goto out;
			}
			if (got == 0)
				break;
			plen += (size_t)got;
			if (plen > p->max_doc) {
				TOO_LONG(plen, 1);
				goto out; /* skipped: the rest of the member is not read */
			}
		}
		ADD(para, plen, 1);
		goto out;
	}
	while ((r = mt_input_getline(in, &line, &len, err)) == 1 || r == 2) {
		lineno++;
		if (r == 2) { /* a line over the cap, not kept */
			if (o->format == MT_TOK_TEXT_PARA) { /* the paragraph it is part of goes too */
				if (plen != SIZE_MAX)
					TOO_LONG(plen + len, plen ? pline : lineno);
				plen = SIZE_MAX; /* dropped through to its blank line */
			} else {
				TOO_LONG(len, lineno);
			}
			r = 1;
			continue;
		}
		if (o->format == MT_TOK_JSON) {
			if (is_blank(line, len))
				continue;
			ADD(line, len, lineno);
		} else if (o->format == MT_TOK_TEXT_LINE) {
			if (len && line[len - 1] == '\r')
				len--;
			ADD(line, len, lineno);
		} else { /* paragraphs */
			if (len && line[len - 1] == '\r')
				len--;
			if (is_blank(line, len)) {
				if (plen && plen != SIZE_MAX)
					ADD(para, plen, pline);
				plen = 0;
				continue;
			}
			if (plen == SIZE_MAX) /* a paragraph already over the cap */
				continue;
			if (plen + len + 1 > p->max_doc) {
				TOO_LONG(plen + len + 1, plen ? pline : lineno);
				plen = SIZE_MAX;
				continue;
			}
			if (plen + len + 1 > pcap) {
				char *np;
				pcap = (plen + len + 1) * 2;
				np = realloc(para, pcap);
				if (!np) {
					r = mt_err_set(err, MT_EXIT_IO, "out of memory");
					goto out;
				}
				para = np;
			}
			if (plen)
				para[plen++] = '\n';
			else
				pline = lineno;
			memcpy(para + plen, line, len);
			plen += len;
		}
	}
	if (r == 0 && o->format == MT_TOK_TEXT_PARA && plen && plen != SIZE_MAX)
		ADD(para, plen, pline);
out:
	free(para);
	return r < 0 ? -1 : 0;
stopped:
	free(para);
	return 1;
#undef ADD
#undef FLUSH_IF_FULL
}

static void *reader_main(void *arg)
{
	struct pipe *p = arg;
	const struct mt_tokenize_opts *o = p->o;
	struct mt_err err = { 0 };
	struct batch *b = begin_batch(p);
	int64_t base = 0;
	int failed = 0;

	for (int i = 0; b && i < o->ninputs && !failed; i++) {
		struct mt_input *in;
		int r;

		if (mt_input_open(&in, o->inputs[i], &err)) {
			failed = 1;
			break;
		}
		while ((r = mt_input_next(in, &err)) == 1) {
			r = read_member(p, in, &b, base, &err);
			if (r != 0)
				break;
		}
		if (r < 0)
			failed = 1;
		base += mt_input_consumed(in);
		mt_input_close(in);
		if (r > 0)
			b = NULL; /* stopped by the writer */
	}
	if (b && !failed)
		submit_batch(p, b, base);
	pthread_mutex_lock(&p->mu);
	if (failed) {
		p->reader_failed = 1;
		p->reader_err = err;
	}
	p->reader_done = 1;
	p->reader_cpu = thread_cpu();
	pthread_cond_broadcast(&p->cv_work);
	pthread_cond_broadcast(&p->cv_done);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* ---- workers --------------------------------------------------------------------------- */

static int key_doc_begin(struct key_out *k)
{
	if (mt_array_grow(&k->nseq, &k->dcap, k->ndoc + 1, sizeof(*k->nseq), 1024))
		return -1;
	k->nseq[k->ndoc++] = 0;
	return 0;
}

static int key_seq_add(struct key_out *k, int32_t len)
{
	if (mt_array_grow(&k->lens, &k->lcap, k->nlens + 1, sizeof(*k->lens), 1024))
		return -1;
	k->lens[k->nlens++] = len;
	k->nseq[k->ndoc - 1]++;
	return 0;
}

/* Aligned so that no two workers' hot state shares a cache line. */
struct __attribute__((aligned(128))) worker {
	struct pipe *p;
	struct mt_bpe bpe;
	struct mt_jsontext json;
	char *fix;    /* scratch for repaired text */
	size_t fixcap;
	pthread_t th;
	/* where the time went, for -vv */
	int64_t batches, bytes;
	double busy, wait, cpu; /* wall seconds in batches, waiting for one; CPU seconds */
};

/* Tokenize one sentence into key k of the current document. */
static int sentence(struct worker *w, struct batch *b, struct key_out *k, const char *s, size_t n,
		    struct mt_err *err)
{
	size_t before = k->toks.n, valid = mt_utf8_valid_prefix(s, n);

	b->text += (int64_t)n;

	if (valid < n) {
		size_t rep;
		if (w->fixcap < 3 * n + 1) {
			char *nf = realloc(w->fix, 3 * n + 1);
			if (!nf)
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			w->fix = nf;
			w->fixcap = 3 * n + 1;
		}
		n = mt_utf8_repair(s, n, w->fix, &rep);
		s = w->fix;
		b->repaired += (int64_t)rep;
	}
	if (mt_bpe_encode(&w->bpe, s, n, &k->toks, err))
		return -1;
	if (k->toks.n > before)
		return key_seq_add(k, (int32_t)(k->toks.n - before)) ? mt_err_set(err, MT_EXIT_IO, "out of memory") : 0;
	return 0;
}

/* Undo the partial output of a record that turned out bad. */
static void rollback(struct batch *b, int nkeys, const size_t *toks, const size_t *lens, const size_t *docs)
{
	for (int k = 0; k < nkeys; k++) {
		b->out[k].toks.n = toks[k];
		b->out[k].nlens = lens[k];
		b->out[k].ndoc = docs[k];
	}
}

static int do_record(struct worker *w, struct batch *b, const struct rec *r, struct mt_err *err)
{
	const struct mt_tokenize_opts *o = w->p->o;
	const char *origin = r->origin;
	char *s = b->buf + r->off;
	int rc = 0;

	if (o->format != MT_TOK_JSON) {
		struct key_out *k = &b->out[0];
		if (key_doc_begin(k))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		if (r->len && sentence(w, b, k, s, r->len, err))
			return -1;
		if (k->nseq[k->ndoc - 1] == 0)
			b->empty++;
		else if (o->append_eod) {
			k->lens[k->nlens - 1]++;
			if (mt_ids_push(&k->toks, o->eod))
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
		}
		return 0;
	} else {
		struct mt_jsontext *jt = &w->json;
		if (mt_jsontext_parse(jt, s, r->len, o->keys, o->nkeys, err))
			return mt_err_prefix(err, "'%s':%lld", origin, (long long)r->line);
		b->repaired += jt->surrogates;
		for (int k = 0; k < o->nkeys && !rc; k++) {
			struct key_out *ko = &b->out[k];
			int np = jt->count[k];
			if (np == MT_JSONTEXT_MISSING)
				return mt_err_set(err, MT_EXIT_DATA, "'%s':%lld: key '%s' not found", origin,
						  (long long)r->line, o->keys[k]);
			if (np == MT_JSONTEXT_NOT_TEXT && jt->bad_item[k] >= 0)
				return mt_err_set(err, MT_EXIT_DATA, "'%s':%lld: key '%s': item %d of the list is not a string",
						  origin, (long long)r->line, o->keys[k], jt->bad_item[k]);
			if (np == MT_JSONTEXT_NOT_TEXT)
				return mt_err_set(err, MT_EXIT_DATA, "'%s':%lld: key '%s' is neither a string nor a list of strings",
						  origin, (long long)r->line, o->keys[k]);
			if (key_doc_begin(ko))
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			for (int i = 0; i < np && !rc; i++) {
				int q = jt->first[k] + i;
				rc = sentence(w, b, ko, jt->buf + jt->off[q], jt->len[q], err);
			}
			if (rc)
				break;
			if (ko->nseq[ko->ndoc - 1] == 0) {
				if (k == 0)
					b->empty++;
			} else if (o->append_eod) {
				ko->lens[ko->nlens - 1]++;
				if (mt_ids_push(&ko->toks, o->eod))
					rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
			}
		}
	}
	return rc;
}

/* Rewrite the int32 ids in place as the dtype's little-endian bytes (the dtype is never
 * wider than int32 here). */
static int to_dtype(struct mt_ids *t, int dtype, struct mt_err *err)
{
	if (dtype == MT_IDX_I32)
		return 0;
	if (dtype == MT_IDX_U16) {
		uint16_t *o = (uint16_t *)t->a;
		for (size_t i = 0; i < t->n; i++) {
			if ((uint32_t)t->a[i] > UINT16_MAX)
				return mt_err_set(err, MT_EXIT_DATA, "token %d does not fit uint16", t->a[i]);
			o[i] = (uint16_t)t->a[i];
		}
		return 0;
	}
	return mt_err_set(err, MT_EXIT_USAGE, "internal: mt-tokenize writes uint16 or int32, not dtype %d", dtype);
}

static void do_batch(struct worker *w, struct batch *b)
{
	const struct mt_tokenize_opts *o = w->p->o;
	size_t toks[MT_TOK_MAX_KEYS], lens[MT_TOK_MAX_KEYS], docs[MT_TOK_MAX_KEYS];
	int nk = o->format == MT_TOK_JSON ? o->nkeys : 1;

	for (int k = 0; k < nk; k++) {
		b->out[k].toks.n = 0;
		b->out[k].nlens = 0;
		b->out[k].ndoc = 0;
	}
	b->good = b->bad = b->repaired = b->empty = b->text = 0;
	b->failed = 0;
	for (int i = 0; i < b->nrec; i++) {
		struct mt_err err = { 0 };
		for (int k = 0; k < nk; k++) {
			toks[k] = b->out[k].toks.n;
			lens[k] = b->out[k].nlens;
			docs[k] = b->out[k].ndoc;
		}
		int64_t text = b->text;
		if (do_record(w, b, &b->recs[i], &err) == 0) {
			b->good++;
			continue;
		}
		b->text = text;
		rollback(b, nk, toks, lens, docs);
		if (o->skip_bad_lines && err.code == MT_EXIT_DATA) {
			b->bad++;
			if (__atomic_fetch_add(&w->p->warned, 1, __ATOMIC_RELAXED) < 10)
				mt_warn("skipping %s", err.msg);
			continue;
		}
		b->failed = 1;
		b->err = err;
		break;
	}
	/* narrow to the output dtype here, in parallel, so the writer only copies */
	for (int k = 0; k < nk && !b->failed; k++)
		if (to_dtype(&b->out[k].toks, o->dtype, &b->err)) {
			b->failed = 1;
			break;
		}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pipe *p = w->p;

	for (;;) {
		struct batch *b;
		double t = mt_now();

		pthread_mutex_lock(&p->mu);
		while (!p->stop && p->next_work == p->produced && !p->reader_done)
			pthread_cond_wait(&p->cv_work, &p->mu);
		if (p->stop || (p->next_work == p->produced && p->reader_done)) {
			pthread_mutex_unlock(&p->mu);
			w->wait += mt_now() - t;
			w->cpu = thread_cpu();
			return NULL;
		}
		b = slot(p, p->next_work++);
		pthread_mutex_unlock(&p->mu);
		w->wait += mt_now() - t;
		t = mt_now();
		do_batch(w, b);
		w->busy += mt_now() - t;
		w->batches++;
		w->bytes += (int64_t)b->len;
		pthread_mutex_lock(&p->mu);
		b->done = 1;
		pthread_cond_broadcast(&p->cv_done);
		pthread_mutex_unlock(&p->mu);
	}
}

/* ---- writer (the calling thread) ------------------------------------------------------------ */

/* Where each thread's time went (-vv): a starved worker waits, a saturated serial stage
 * (reader or writer) shows busy time close to the wall time, a slow core shows more CPU
 * seconds per MB than a lone worker has. */
static void report_threads(const struct pipe *p, const struct worker *ws, int nw, double t0,
			   double t_stream, double t_commit, double t_wait, double t_write, double wcpu)
{
	double wall = t_stream - t0, cpu = 0, busy = 0, wait = 0, lo = 1e300, hi = 0;
	int64_t bytes = 0;

	for (int i = 0; i < nw; i++) {
		const struct worker *w = &ws[i];
		double s = w->bytes ? w->cpu / ((double)w->bytes / 1e6) : 0;
		mt_debug("worker %d: %lld batches, %.1f MB, busy %.3f s, waiting %.3f s, cpu %.3f s (%.2f ms/MB)",
			 i, (long long)w->batches, (double)w->bytes / 1e6, w->busy, w->wait, w->cpu, s * 1e3);
		cpu += w->cpu;
		busy += w->busy;
		wait += w->wait;
		bytes += w->bytes;
		if (w->bytes && s < lo)
			lo = s;
		if (w->bytes && s > hi)
			hi = s;
	}
	mt_debug("workers: %d, busy %.1f%% of %.3f s, waiting %.1f%%, cpu %.1f%% of busy; "
		 "%.2f ms cpu/MB (min %.2f, max %.2f)",
		 nw, 100 * busy / (nw * wall), wall, 100 * wait / (nw * wall), busy > 0 ? 100 * cpu / busy : 0,
		 bytes ? 1e3 * cpu / ((double)bytes / 1e6) : 0, lo < 1e300 ? lo * 1e3 : 0, hi * 1e3);
	mt_debug("reader: cpu %.3f s, blocked on a full pool %.3f s", p->reader_cpu, p->reader_blocked);
	mt_debug("writer: writing %.3f s, waiting for the next batch %.3f s, cpu %.3f s; commit (fsync, index) %.3f s",
		 t_write, t_wait, wcpu, t_commit);
}

static void stop_all(struct pipe *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->cv_work);
	pthread_cond_broadcast(&p->cv_free);
	pthread_cond_broadcast(&p->cv_done);
	pthread_mutex_unlock(&p->mu);
}

int mt_tokenize_run(const struct mt_tokenize_opts *o, struct mt_tokenize_stats *st,
		    struct mt_err *err)
{
	struct pipe p;
	struct worker *ws = NULL;
	struct mt_idx_writer *iw[MT_TOK_MAX_KEYS] = { 0 };
	struct mt_progress prog;
	pthread_t reader;
	int nk = o->format == MT_TOK_JSON ? o->nkeys : 1, nw = o->workers > 0 ? o->workers : 1;
	int started = 0, rc = -1, reader_started = 0;
	double t0 = mt_now(), cpu0 = thread_cpu(), t_wait = 0, t_write = 0, t_stream = 0, t_commit = 0, t;
	int64_t next_log = o->log_interval;

	memset(st, 0, sizeof(*st));
	memset(&p, 0, sizeof(p));
	memset(&prog, 0, sizeof(prog)); /* disabled until mt_progress_init */
	p.o = o;
	p.max_doc = o->max_document ? o->max_document : (size_t)MT_TOK_MAX_DOCUMENT;
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv_work, NULL);
	pthread_cond_init(&p.cv_done, NULL);
	pthread_cond_init(&p.cv_free, NULL);
	p.nslots = POOL_PER_WORKER * nw + 2;
	p.pool = aligned_alloc(128, (size_t)p.nslots * sizeof(*p.pool));
	if (p.pool)
		memset(p.pool, 0, (size_t)p.nslots * sizeof(*p.pool));
	ws = aligned_alloc(128, (size_t)nw * sizeof(*ws));
	if (ws)
		memset(ws, 0, (size_t)nw * sizeof(*ws));
	if (!p.pool || !ws) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	p.total_size = 0;
	for (int i = 0; i < o->ninputs; i++) {
		struct mt_input *in;
		int64_t sz = -1;
		/* sizes for the ETA; a pipe or a missing file makes it unknown */
		if (strcmp(o->inputs[i], "-") != 0 && mt_input_open(&in, o->inputs[i], err) == 0) {
			sz = mt_input_size(in);
			mt_input_close(in);
		}
		if (sz < 0 || p.total_size < 0)
			p.total_size = -1;
		else
			p.total_size += sz;
	}
	mt_err_clear(err);
	for (int k = 0; k < nk; k++) {
		char prefix[4096];
		snprintf(prefix, sizeof(prefix), "%s_%s_document", o->output_prefix,
			 o->format == MT_TOK_JSON ? o->keys[k] : "text");
		if (mt_idx_writer_open(&iw[k], prefix, o->dtype, err))
			goto out;
	}
	for (int i = 0; i < nw; i++) {
		ws[i].p = &p;
		if (mt_bpe_init(&ws[i].bpe, o->vocab, o->pretok, err))
			goto out;
	}
	for (; started < nw; started++)
		if (pthread_create(&ws[started].th, NULL, worker_main, &ws[started])) {
			mt_err_set(err, MT_EXIT_IO, "cannot start worker threads");
			goto out;
		}
	if (pthread_create(&reader, NULL, reader_main, &p)) {
		mt_err_set(err, MT_EXIT_IO, "cannot start the reader thread");
		goto out;
	}
	reader_started = 1;
	mt_progress_init(&prog, o->prog, "docs", p.total_size, o->quiet);
	for (;;) {
		struct batch *b;

		t = mt_now();
		pthread_mutex_lock(&p.mu);
		while (!(p.consumed < p.produced && slot(&p, p.consumed)->done) &&
		       !(p.reader_done && p.consumed == p.produced))
			pthread_cond_wait(&p.cv_done, &p.mu);
		t_wait += mt_now() - t;
		if (p.consumed == p.produced) {
			pthread_mutex_unlock(&p.mu);
			break; /* reader done, everything written */
		}
		b = slot(&p, p.consumed);
		pthread_mutex_unlock(&p.mu);
		t = mt_now();
		if (b->failed) {
			*err = b->err;
			goto out;
		}
		for (int k = 0; k < nk; k++) {
			struct key_out *ko = &b->out[k];
			if (mt_idx_writer_add_batch(iw[k], ko->toks.a, ko->toks.n * (size_t)mt_idx_dtype_size(o->dtype),
						    ko->lens, ko->nlens, ko->nseq, ko->ndoc, err))
				goto out;
			st->tokens += (int64_t)ko->toks.n;
		}
		st->documents += b->good;
		st->bad_lines += b->bad;
		st->repaired += b->repaired;
		st->empty += b->empty;
		st->text_bytes += b->text;
		mt_progress_update(&prog, b->consumed, st->documents);
		if (o->log_interval > 0 && st->documents >= next_log) {
			double dt = mt_now() - t0;
			mt_info("processed %lld documents (%.1f docs/s, %.2f MB/s)", (long long)st->documents,
				(double)st->documents / dt, (double)st->text_bytes / dt / 1e6);
			while (next_log <= st->documents)
				next_log += o->log_interval;
		}
		pthread_mutex_lock(&p.mu);
		p.consumed++;
		pthread_cond_broadcast(&p.cv_free);
		pthread_mutex_unlock(&p.mu);
		t_write += mt_now() - t;
	}
	t_stream = mt_now();
	mt_progress_done(&prog);
	if (p.reader_failed) {
		*err = p.reader_err;
		goto out;
	}
	for (int k = 0; k < nk; k++) {
		int r = mt_idx_writer_commit(iw[k], err);
		iw[k] = NULL;
		if (r)
			goto out;
	}
	t_commit = mt_now() - t_stream;
	rc = 0;
out:
	if (rc)
		mt_progress_done(&prog);
	stop_all(&p);
	if (reader_started)
		pthread_join(reader, NULL);
	for (int i = 0; i < started; i++)
		pthread_join(ws[i].th, NULL);
	if (rc == 0 && p.reader_failed) {
		*err = p.reader_err;
		rc = -1;
	}
	st->bad_lines += p.too_long;
	for (int k = 0; k < nk; k++)
		if (iw[k])
			mt_idx_writer_abort(iw[k]);
	if (rc == 0 && mt_log_get_level() >= MT_LOG_DEBUG)
		report_threads(&p, ws, nw, t0, t_stream, t_commit, t_wait, t_write, thread_cpu() - cpu0);
	for (int i = 0; ws && i < nw; i++) {
		if (ws[i].bpe.v)
			mt_bpe_free(&ws[i].bpe);
		mt_jsontext_free(&ws[i].json);
		free(ws[i].fix);
	}
	free(ws);
	for (int i = 0; p.pool && i < p.nslots; i++) {
		free(p.pool[i].buf);
		free(p.pool[i].recs);
		for (int k = 0; k < MT_TOK_MAX_KEYS; k++) {
			mt_ids_free(&p.pool[i].out[k].toks);
			free(p.pool[i].out[k].lens);
			free(p.pool[i].out[k].nseq);
		}
	}
	free(p.pool);
	for (int i = 0; i < p.norigins; i++)
		free(p.origins[i]);
	free(p.origins);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv_work);
	pthread_cond_destroy(&p.cv_done);
	pthread_cond_destroy(&p.cv_free);
	st->seconds = mt_now() - t0;
	return rc;
}
