/* lttune.c: the matmul tuning file (lttune.h). */
#include "backend/lttune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/files.h"
#include "base/knobs.h"
#include "base/log.h"

_Static_assert(sizeof(struct mt_lt_key) == 4 * sizeof(int) + 6 * sizeof(int64_t) + 2 * sizeof(int),
	       "mt_lt_key is compared whole: no padding");

static const char *const field_name[MT_LTTUNE_FIELDS] = {
	"device", "cuBLASLt version", "A/B type", "C/D type", "op(A)", "op(B)", "m", "n", "k", "lda", "ldb", "ldd",
	"beta", "epilogue", "algorithm id", "tile", "stages", "split-K", "reduction scheme", "CTA swizzling",
	"custom option", "cluster shape", "ms", "first ms", "candidates",
};

static const char *type_name(int t)
{
	return t == MT_F32 ? "f32" : t == MT_BF16 ? "bf16" : "f16";
}

static int type_of(const char *s)
{
	return !strcmp(s, "f32") ? MT_F32 : !strcmp(s, "bf16") ? MT_BF16 : !strcmp(s, "f16") ? MT_F16 : -1;
}

/* a whole decimal integer in [lo, hi] */
static int int_field(const char *s, long long lo, long long hi, long long *v)
{
	char *end;

	errno = 0;
	*v = strtoll(s, &end, 10);
	return *s && !*end && !errno && *v >= lo && *v <= hi ? 0 : -1;
}

/* the fields of one line (tabs replaced by NULs in place); how many there were */
static int split(char *line, char **f)
{
	int n = 0;

	for (char *p = line;;) {
		char *t = strchr(p, '\t');
		if (n < MT_LTTUNE_FIELDS)
			f[n] = p;
		n++;
		if (!t)
			break;
		*t = 0;
		p = t + 1;
	}
	return n;
}

/* fields 2.. of a line into p; the index of the first bad field, or -1 */
static int fill(char **f, struct mt_lt_pick *p)
{
	long long v;
	char *end;

	memset(p, 0, sizeof(*p));
	if ((p->key.ab = type_of(f[2])) < 0)
		return 2;
	if ((p->key.cd = type_of(f[3])) < 0)
		return 3;
	for (int i = 4; i < 6; i++)
		if (strcmp(f[i], "N") && strcmp(f[i], "T"))
			return i;
	p->key.ta = !strcmp(f[4], "T"), p->key.tb = !strcmp(f[5], "T");
	for (int i = 6; i < 12; i++) {
		if (int_field(f[i], 1, (1ll << 40), &v))
			return i;
		int64_t *dst[] = { &p->key.m, &p->key.n, &p->key.k, &p->key.lda, &p->key.ldb, &p->key.ldd };
		*dst[i - 6] = v;
	}
	if (int_field(f[12], 0, 1, &v))
		return 12;
	p->key.beta = (int)v;
	if (int_field(f[13], 0, 1 << 30, &v))
		return 13;
	p->key.epi = (int)v;
	for (int i = 0; i < MT_LT_CFG; i++) {
		if (int_field(f[14 + i], -1, 1 << 30, &v))
			return 14 + i;
		p->cfg[i] = (int)v;
	}
	for (int i = 22; i < 24; i++) {
		errno = 0;
		double d = strtod(f[i], &end);
		if (!*f[i] || *end || errno || !(d >= 0 && d < 1e9))
			return i;
		*(i == 22 ? &p->ms : &p->first_ms) = (float)d;
	}
	if (int_field(f[24], 0, 1 << 20, &v))
		return 24;
	p->ncand = (int)v;
	return -1;
}

/* Calls each(line's pick, is it ident's, the line, ctx) for every pick line of text, in order. */
static int walk(const char *path, const char *text, const char *ident,
		int (*each)(const struct mt_lt_pick *p, int ours, const char *line, void *ctx), void *ctx,
		struct mt_err *err)
{
	char *copy = strdup(text), *line;
	int lineno = 0, rc = 0;

	if (!copy)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (char *p = copy; p && !rc; lineno++) {
		char *f[MT_LTTUNE_FIELDS], *raw;
		struct mt_lt_pick pick;
		int nf, bad, ours;
		size_t id0;

		line = p;
		p = strchr(p, '\n');
		if (p)
			*p++ = 0;
		if (!*line || *line == '#')
			continue;
		raw = strdup(line);
		if (!raw) {
			rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
			break;
		}
		nf = split(line, f);
		if (nf != MT_LTTUNE_FIELDS) {
			rc = mt_err_set(err, MT_EXIT_DATA, "%s:%d: %d tab-separated fields, expected %d (%s ... %s)", path,
					lineno + 1, nf, MT_LTTUNE_FIELDS, field_name[0], field_name[MT_LTTUNE_FIELDS - 1]);
			free(raw);
			break;
		}
		if ((bad = fill(f, &pick)) >= 0) {
			rc = mt_err_set(err, MT_EXIT_DATA, "%s:%d: field %d (%s) is not valid: \"%.40s\"", path, lineno + 1,
					bad + 1, field_name[bad], f[bad]);
			free(raw);
			break;
		}
		id0 = strlen(f[0]);
		ours = !strncmp(ident, f[0], id0) && ident[id0] == '\t' && !strcmp(ident + id0 + 1, f[1]);
		rc = each(&pick, ours, raw, ctx);
		free(raw);
	}
	free(copy);
	return rc;
}

struct collect {
	struct mt_lt_pick *p;
	int n, cap;
	struct mt_err *err;
};

static int collect_one(const struct mt_lt_pick *p, int ours, const char *line, void *ctx)
{
	struct collect *c = ctx;

	(void)line;
	if (!ours)
		return 0;
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 32;
		struct mt_lt_pick *np = realloc(c->p, (size_t)cap * sizeof(*np));
		if (!np)
			return mt_err_set(c->err, MT_EXIT_IO, "out of memory");
		c->p = np, c->cap = cap;
	}
	c->p[c->n++] = *p;
	return 0;
}

int mt_lttune_parse(const char *path, const char *text, const char *ident, struct mt_lt_pick **picks, int *n,
		    struct mt_err *err)
{
	struct collect c = { NULL, 0, 0, err };

	*picks = NULL, *n = 0;
	if (walk(path, text, ident, collect_one, &c, err)) {
		free(c.p);
		return -1;
	}
	*picks = c.p, *n = c.n;
	return 0;
}

int mt_lttune_line(char *buf, size_t n, const char *ident, const struct mt_lt_pick *p)
{
	const struct mt_lt_key *k = &p->key;
	int len = snprintf(buf, n, "%s\t%s\t%s\t%c\t%c\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%d\t%d", ident,
			   type_name(k->ab), type_name(k->cd), k->ta ? 'T' : 'N', k->tb ? 'T' : 'N', (long long)k->m,
			   (long long)k->n, (long long)k->k, (long long)k->lda, (long long)k->ldb, (long long)k->ldd,
			   k->beta, k->epi);

	for (int i = 0; i < MT_LT_CFG && len >= 0 && (size_t)len < n; i++)
		len += snprintf(buf + len, n - (size_t)len, "\t%d", p->cfg[i]);
	if (len >= 0 && (size_t)len < n)
		len += snprintf(buf + len, n - (size_t)len, "\t%.4f\t%.4f\t%d\n", p->ms, p->first_ms, p->ncand);
	return len >= 0 && (size_t)len < n ? len : -1;
}

struct rewrite {
	FILE *fp;
	const struct mt_lt_pick *p;
	int replaced;
};

static int rewrite_one(const struct mt_lt_pick *q, int ours, const char *line, void *ctx)
{
	struct rewrite *r = ctx;

	if (ours && !memcmp(&q->key, &r->p->key, sizeof(q->key))) {
		r->replaced = 1;
		return 0;
	}
	fprintf(r->fp, "%s\n", line);
	return 0;
}

int mt_lttune_save(const char *path, const char *ident, const struct mt_lt_pick *p, struct mt_err *err)
{
	struct mt_atomic w;
	struct rewrite r = { NULL, p, 0 };
	char *text = NULL, line[512];

	if (mt_lttune_line(line, sizeof(line), ident, p) < 0)
		return mt_err_set(err, MT_EXIT_IO, "%s: a pick too long to write", path);
	if (access(path, F_OK) == 0 && mt_file_read(path, &text, NULL, err))
		return -1;
	if (mt_atomic_open(&w, path, err)) {
		free(text);
		return -1;
	}
	r.fp = mt_atomic_file(&w);
	fprintf(r.fp, "# mt matmul tuning (MT_CUDA_MATMUL_TUNING; docs/mt-train.md): cuBLASLt's candidates timed under\n"
		      "# sustained load, one pick a product. Fields, tab-separated:");
	for (int i = 0; i < MT_LTTUNE_FIELDS; i++)
		fprintf(r.fp, "%s%s", i ? ", " : " ", field_name[i]);
	fputc('\n', r.fp);
	/* every pick line is kept but p's own (comments are not) */
	if (text) {
		if (walk(path, text, ident, rewrite_one, &r, err)) {
			mt_atomic_abort(&w);
			free(text);
			return -1;
		}
	}
	fputs(line, r.fp);
	free(text);
	return mt_atomic_commit(&w, err);
}

#ifdef MT_HAVE_CUDA

struct mt_lttune {
	char *path;
	char ident[320];
	int failed; /* a save failed: said once, tuning goes on in memory */
};

static void tuned(void *ctx, const struct mt_lt_pick *p, const char *msg)
{
	struct mt_lttune *t = ctx;
	const struct mt_lt_key *k = &p->key;
	struct mt_err err = { 0 };
	char what[160];

	snprintf(what, sizeof(what), "%s %c%c %lld x %lld x %lld%s", type_name(k->ab), k->ta ? 'T' : 'N',
		 k->tb ? 'T' : 'N', (long long)k->m, (long long)k->n, (long long)k->k, k->beta ? " (+C)" : "");
	if (msg) {
		mt_warn("matmul tuning: %s: %s", what, msg);
		return;
	}
	mt_info("matmul tuning: %s: tile id %d, stages id %d, cluster id %d, of %d candidates: %.3f ms against the "
		"first's %.3f%s",
		what, p->cfg[1], p->cfg[2], p->cfg[7], p->ncand, p->ms, p->first_ms,
		p->ms < p->first_ms ? "" : " (the first kept)");
	if (!t->failed && mt_lttune_save(t->path, t->ident, p, &err)) {
		mt_warn("matmul tuning: %s (the picks are kept for this run only)", err.msg);
		t->failed = 1;
	}
}

int mt_lttune_setup(struct mt_lt *lt, struct mt_lttune **out, struct mt_err *err)
{
	const char *path = mt_knob_str(MT_KNOB_CUDA_MATMUL_TUNING), *ms_env = mt_knob_str(MT_KNOB_CUDA_MATMUL_TUNING_MS);
	struct mt_lttune *t;
	struct mt_lt_pick *picks = NULL;
	char *text = NULL, *end;
	double ms = 150;
	int n = 0;

	*out = NULL;
	if (!path || !*path)
		return 0;
	if (ms_env && *ms_env) {
		errno = 0;
		ms = strtod(ms_env, &end);
		if (*end || errno || !(ms >= 1 && ms <= 60000))
			return mt_err_set(err, MT_EXIT_USAGE, "MT_CUDA_MATMUL_TUNING_MS=%s: expected milliseconds, 1 to 60000",
					  ms_env);
	}
	t = calloc(1, sizeof(*t));
	if (!t || !(t->path = strdup(path))) {
		free(t);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (mt_lt_ident(t->ident, sizeof(t->ident))) {
		mt_lttune_free(t);
		return mt_err_set(err, MT_EXIT_IO, "matmul tuning: %s", mt_cuda_error());
	}
	if (access(path, F_OK) == 0) {
		if (mt_file_read(path, &text, NULL, err) ||
		    mt_lttune_parse(path, text, t->ident, &picks, &n, err)) {
			free(text);
			mt_lttune_free(t);
			return mt_err_prefix(err, "MT_CUDA_MATMUL_TUNING");
		}
		free(text);
	}
	for (int i = 0; i < n; i++)
		if (mt_lt_add_pick(lt, &picks[i])) {
			free(picks);
			mt_lttune_free(t);
			return mt_err_set(err, MT_EXIT_IO, "matmul tuning: %s", mt_cuda_error());
		}
	free(picks);
	mt_lt_tuning(lt, ms, tuned, t);
	mt_info("matmul tuning: %s: %d picks for this device; products without one are timed (%.0f ms a candidate, twice)",
		path, n, ms);
	*out = t;
	return 0;
}

void mt_lttune_free(struct mt_lttune *t)
{
	if (!t)
		return;
	free(t->path);
	free(t);
}

#else

int mt_lttune_setup(struct mt_lt *lt, struct mt_lttune **t, struct mt_err *err)
{
	(void)lt, (void)err;
	*t = NULL;
	return 0;
}

void mt_lttune_free(struct mt_lttune *t)
{
	(void)t;
}

#endif
