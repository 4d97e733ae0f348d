/* mt-index: inspect, verify, merge and print Megatron indexed datasets (.bin/.idx);
 * build writes the sample indices of each training split (lib/data/dataplan.c).
 *
 * main() dispatches on the command word; each cmd_* parses its own options and
 * does its work through lib/ (idx.c to read and write, idxcheck.c for verify,
 * idxstat.c for the statistics, tokenizer.h and bpe.h to decode). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text/bpe.h"
#include "data/idx.h"
#include "data/idxcheck.h"
#include "data/idxstat.h"
#include "base/log.h"
#include "base/progress.h"
#include "text/tokenizer.h"
#include "base/utf8.h"
#include "dataopts.h"
#include "tool.h"

static const char *const synopsis[] = {
	"stat [--json] PREFIX...",
	"verify [--vocab-size N] PREFIX...",
	"merge --output-prefix OUT (PREFIX... | --input DIR)",
	"cat [--docs A:B] [--json] [--tokenizer-type TYPE [tokenizer files]] PREFIX",
	"build --data-path PREFIX... --seq-length L (--train-samples N | --train-iters N --global-batch-size B) [--split A,B,C] [--seed S] [--data-cache-path DIR] [--json]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-index",
	.summary = "inspect, verify, merge indexed datasets and build the sample indices of a training split",
	.synopsis = synopsis,
	.description =
		"stat prints counts, sizes and document-length percentiles; verify checks every field of a\n"
		"dataset and prints one line per problem; merge concatenates datasets as Megatron's\n"
		"tools/merge_datasets.py does; cat prints documents as ids or, with a tokenizer, as text.\n"
		"A PREFIX names PREFIX.bin and PREFIX.idx and may be given with either suffix.\n"
		"build writes the document, sample and shuffle indices of each split as Megatron-core's\n"
		"GPTDataset does, in Megatron's cache files, and prints each split's document range",
	.doc = "docs/mt-index.md",
};

enum {
	O_JSON = 256, O_VOCAB_SIZE, O_OUTPUT, O_INPUT, O_MULTIMODAL, O_DOCS, O_DECODE, O_TYPE, O_VOCAB, O_MERGES,
	O_MODEL, O_PATTERN,
};

static const struct mt_option no_opts[] = { { 0 } };

static const struct mt_option stat_opts[] = {
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "one JSON object per dataset, one a line" },
	{ 0 },
};

static const struct mt_option verify_opts[] = {
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB_SIZE, "N", "also check that every token is in [0, N)" },
	{ 0 },
};

static const struct mt_option merge_opts[] = {
	{ "output-prefix", 'o', MT_ARG_REQUIRED, O_OUTPUT, "OUT", "write OUT.bin and OUT.idx" },
	{ "input", 0, MT_ARG_REQUIRED, O_INPUT, "DIR", "merge every dataset in DIR, in sorted order (as merge_datasets.py)" },
	{ "multimodal", 0, MT_ARG_NONE, O_MULTIMODAL, NULL, "not supported: multimodal modes arrays are not merged" },
	{ 0 },
};

static const struct mt_option cat_opts[] = {
	{ "docs", 0, MT_ARG_REQUIRED, O_DOCS, "A:B", "only documents A to B-1 (A: alone is to the end, A alone is one)" },
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "one JSON object per document: {\"doc\", \"ids\", \"lengths\"} or {\"doc\", \"text\"}" },
	{ "decode", 0, MT_ARG_NONE, O_DECODE, NULL, "print text (needs the tokenizer options; implied by them)" },
	{ "tokenizer-type", 0, MT_ARG_REQUIRED, O_TYPE, "TYPE",
	  "GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
	  "Llama2Tokenizer or NullTokenizer" },
	{ "vocab-file", 0, MT_ARG_REQUIRED, O_VOCAB, "FILE", "GPT-2 vocab.json" },
	{ "merge-file", 0, MT_ARG_REQUIRED, O_MERGES, "FILE", "GPT-2 merges.txt" },
	{ "tokenizer-model", 0, MT_ARG_REQUIRED, O_MODEL, "FILE", "tiktoken rank file, tokenizer.json or SentencePiece tokenizer.model" },
	{ "tiktoken-pattern", 0, MT_ARG_REQUIRED, O_PATTERN, "PAT", "accepted for symmetry with mt-tokenize; decoding needs none" },
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB_SIZE, "N", "NullTokenizer's vocabulary size" },
	{ 0 },
};

struct args {
	const char **prefixes;
	int nprefixes;
	const char *output, *input_dir, *docs;
	int json, decode;
	long long vocab_size;
	struct mt_tokenizer_args tok;
};

static void parse(struct mt_opt *o, struct args *a)
{
	int id;

	a->prefixes = calloc((size_t)o->argc + 1, sizeof(*a->prefixes));
	if (!a->prefixes)
		mt_die(MT_EXIT_IO, "out of memory");
	while ((id = mt_opt_next(o)) != MT_OPT_END) {
		mt_tool_common(o, id);
		switch (id) {
		case MT_OPT_ARG: a->prefixes[a->nprefixes++] = o->arg; break;
		case O_JSON: a->json = 1; break;
		case O_VOCAB_SIZE:
			if (mt_opt_long(o, 1, INT64_MAX, &a->vocab_size))
				mt_die_usage(o, "%s", o->err.msg);
			a->tok.vocab_size = a->vocab_size;
			break;
		case O_OUTPUT: a->output = o->arg; break;
		case O_INPUT: a->input_dir = o->arg; break;
		case O_MULTIMODAL:
			mt_die_usage(o, "--multimodal is not supported: mt-index merge does not merge modes arrays");
		case O_DOCS: a->docs = o->arg; break;
		case O_DECODE: a->decode = 1; break;
		case O_TYPE: a->tok.type = o->arg; break;
		case O_VOCAB: a->tok.vocab_file = o->arg; break;
		case O_MERGES: a->tok.merge_file = o->arg; break;
		case O_MODEL: a->tok.tokenizer_model = o->arg; break;
		case O_PATTERN: a->tok.pattern = o->arg; break;
		}
	}
}

/* A dataset ready to read: opened, every entry checked; dies with exit 3 or 4. */
static struct mt_idx *open_checked(const char *prefix)
{
	struct mt_idx *ix;
	struct mt_err e = { 0 };

	if (mt_idx_open(&ix, prefix, &e) || mt_idx_verify(ix, &e))
		mt_die_err(&e);
	return ix;
}

static void flush_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout))
		mt_die(MT_EXIT_IO, "cannot write to stdout");
}

/* stat ---------------------------------------------------------------------- */

struct stat_row {
	const char *name;  /* prefix, or NULL for the total */
	const char *dtype; /* "uint16", or a list for a mixed total */
	int dtype_code;    /* 0 for a mixed total */
	int64_t sequences, bin_bytes, idx_bytes;
	struct mt_idx_lenstat len;
};

static void print_block(struct stat_row *r, int ndatasets)
{
	struct mt_idx_lenstat *s = &r->len;
	char bin[32], idx[32];

	mt_fmt_bytes(bin, sizeof(bin), (double)r->bin_bytes);
	mt_fmt_bytes(idx, sizeof(idx), (double)r->idx_bytes);
	if (r->name)
		printf("%s\n", r->name);
	else
		printf("total: %d datasets\n", ndatasets);
	printf("  dtype        %s\n", r->dtype);
	printf("  documents    %lld (%lld empty)\n", (long long)s->n, (long long)s->empty);
	printf("  sequences    %lld\n", (long long)r->sequences);
	printf("  tokens       %lld\n", (long long)s->sum);
	printf("  .bin         %lld bytes (%s)\n", (long long)r->bin_bytes, bin);
	printf("  .idx         %lld bytes (%s)\n", (long long)r->idx_bytes, idx);
	if (s->n)
		printf("  doc length   min %lld  p50 %lld  p90 %lld  p99 %lld  max %lld  mean %.2f tokens\n",
		       (long long)s->min, (long long)mt_idx_lenstat_percentile(s, 50),
		       (long long)mt_idx_lenstat_percentile(s, 90), (long long)mt_idx_lenstat_percentile(s, 99),
		       (long long)s->max, mt_idx_lenstat_mean(s));
	else
		printf("  doc length   - (no documents)\n");
}

static json_t *json_len(struct mt_idx_lenstat *s, int p)
{
	return s->n ? json_integer(mt_idx_lenstat_percentile(s, p)) : json_null();
}

static void print_json(struct stat_row *r)
{
	struct mt_idx_lenstat *s = &r->len;
	json_t *len = json_object(), *o = json_object();

	if (!len || !o)
		mt_die(MT_EXIT_IO, "out of memory");
	json_object_set_new(len, "min", s->n ? json_integer(s->min) : json_null());
	json_object_set_new(len, "p50", json_len(s, 50));
	json_object_set_new(len, "p90", json_len(s, 90));
	json_object_set_new(len, "p99", json_len(s, 99));
	json_object_set_new(len, "max", s->n ? json_integer(s->max) : json_null());
	json_object_set_new(len, "mean", s->n ? json_real(mt_idx_lenstat_mean(s)) : json_null());
	json_object_set_new(o, "prefix", json_string(r->name));
	json_object_set_new(o, "dtype", json_string(r->dtype));
	json_object_set_new(o, "dtype_code", json_integer(r->dtype_code));
	json_object_set_new(o, "documents", json_integer(s->n));
	json_object_set_new(o, "empty_documents", json_integer(s->empty));
	json_object_set_new(o, "sequences", json_integer(r->sequences));
	json_object_set_new(o, "tokens", json_integer(s->sum));
	json_object_set_new(o, "bin_bytes", json_integer(r->bin_bytes));
	json_object_set_new(o, "idx_bytes", json_integer(r->idx_bytes));
	json_object_set_new(o, "doc_length", len);
	if (json_dumpf(o, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) != 0 || putchar('\n') == EOF)
		mt_die(MT_EXIT_IO, "cannot write to stdout");
	json_decref(o);
}

static int cmd_stat(struct mt_opt *o, struct args *a)
{
	struct stat_row total = { 0 };
	char dtypes[128] = "";
	struct mt_err e = { 0 };

	parse(o, a);
	if (a->nprefixes == 0)
		mt_die_usage(o, "stat needs at least one PREFIX");
	mt_idx_lenstat_init(&total.len);
	for (int i = 0; i < a->nprefixes; i++) {
		struct mt_idx *ix = open_checked(a->prefixes[i]);
		struct stat_row r = { 0 };
		const char *name = mt_idx_dtype_name(ix->dtype);

		r.name = ix->prefix;
		r.dtype = name;
		r.dtype_code = ix->dtype;
		r.sequences = ix->nseq;
		r.bin_bytes = (int64_t)ix->bin_size;
		r.idx_bytes = (int64_t)ix->idx_size;
		mt_idx_lenstat_init(&r.len);
		if (mt_idx_lenstat_add_dataset(&r.len, ix, &e))
			mt_die_err(&e);
		if (a->json)
			print_json(&r);
		else
			print_block(&r, 1);
		if (a->nprefixes > 1) {
			if (mt_idx_lenstat_merge(&total.len, &r.len, &e))
				mt_die_err(&e);
			total.sequences += r.sequences;
			total.bin_bytes += r.bin_bytes;
			total.idx_bytes += r.idx_bytes;
			if (i == 0)
				total.dtype_code = ix->dtype;
			else if (total.dtype_code != ix->dtype)
				total.dtype_code = 0;
			if (!strstr(dtypes, name) && strlen(dtypes) + strlen(name) + 3 < sizeof(dtypes)) {
				if (dtypes[0])
					strcat(dtypes, ", ");
				strcat(dtypes, name);
			}
			if (!a->json)
				putchar('\n');
		}
		mt_idx_lenstat_free(&r.len);
		mt_idx_close(ix);
	}
	if (a->nprefixes > 1 && !a->json) {
		total.dtype = dtypes;
		print_block(&total, a->nprefixes);
	}
	mt_idx_lenstat_free(&total.len);
	flush_stdout();
	return MT_EXIT_OK;
}

/* verify -------------------------------------------------------------------- */

static void print_problem(void *ctx, const char *line)
{
	printf("%s: %s\n", (const char *)ctx, line);
}

/* PREFIX without a ".bin"/".idx" suffix, as mt_idx_open takes it. */
static char *bare_prefix(const char *p)
{
	size_t n = strlen(p);
	char *s;

	if (n > 4 && (strcmp(p + n - 4, ".bin") == 0 || strcmp(p + n - 4, ".idx") == 0))
		n -= 4;
	if (!(s = strndup(p, n)))
		mt_die(MT_EXIT_IO, "out of memory");
	return s;
}

static int cmd_verify(struct mt_opt *o, struct args *a)
{
	int bad = 0, io = 0;

	parse(o, a);
	if (a->nprefixes == 0)
		mt_die_usage(o, "verify needs at least one PREFIX");
	for (int i = 0; i < a->nprefixes; i++) {
		char *name = bare_prefix(a->prefixes[i]);
		struct mt_idx_check c = { .vocab_size = a->vocab_size, .problem = print_problem, .ctx = name };
		struct mt_err e = { 0 };
		struct mt_idx *ix = NULL;

		if (mt_idx_check_run(&c, name, &e)) {
			mt_error("%s", e.msg); /* a missing or unreadable file: exit 4, after the others */
			io = 1;
		} else if (c.problems == 0 && (mt_idx_open(&ix, name, &e) || mt_idx_verify(ix, &e))) {
			/* the reader and the check must agree; if they ever do not, say so */
			if (e.code == MT_EXIT_IO) {
				mt_error("%s", e.msg);
				io = 1;
			} else {
				print_problem(name, e.msg);
				bad = 1;
			}
		} else if (c.problems) {
			bad = 1;
		} else if (!o->quiet) {
			printf("ok %s: %lld documents, %lld tokens\n", name, (long long)c.documents, (long long)c.tokens);
		}
		mt_idx_close(ix);
		free(name);
		if (fflush(stdout) != 0)
			mt_die(MT_EXIT_IO, "cannot write to stdout");
	}
	flush_stdout();
	return io ? MT_EXIT_IO : bad ? MT_EXIT_FALSE : MT_EXIT_OK;
}

/* merge --------------------------------------------------------------------- */

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static int is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Megatron's merge_datasets.py --input DIR: every PREFIX in DIR with PREFIX.bin
 * and PREFIX.idx, in Python's sorted() order (code points, which for UTF-8 is
 * byte order, strcmp's). A lone half is an error, as there; other files are
 * left alone (there they are an error too). */
static char **list_dir(const char *dir, int *n)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	char **v = NULL, *path;
	int cap = 0, k = 0;

	if (!dp)
		mt_die(MT_EXIT_IO, "cannot open directory '%s': %s", dir, strerror(errno));
	while ((de = readdir(dp))) {
		size_t len = strlen(de->d_name);
		const char *ext = de->d_name + (len > 4 ? len - 4 : 0);
		size_t stem = len - 4;

		if (len <= 4 || (strcmp(ext, ".bin") != 0 && strcmp(ext, ".idx") != 0))
			continue;
		while (stem > 0 && de->d_name[stem - 1] == '.') /* ".bin", "..idx": no stem, as splitext */
			stem--;
		if (stem == 0)
			continue;
		if (asprintf(&path, "%s/%s", dir, de->d_name) < 0)
			mt_die(MT_EXIT_IO, "out of memory");
		if (!is_file(path)) {
			free(path);
			continue;
		}
		path[strlen(path) - 4] = '\0';
		if (k == cap) {
			cap = cap ? 2 * cap : 64;
			if (!(v = realloc(v, (size_t)cap * sizeof(*v))))
				mt_die(MT_EXIT_IO, "out of memory");
		}
		v[k++] = path;
	}
	closedir(dp);
	qsort(v, (size_t)k, sizeof(*v), cmp_str);
	/* each prefix now appears once per half it has; keep the pairs */
	*n = 0;
	for (int i = 0; i < k; i++) {
		char *bin;

		if (i + 1 < k && strcmp(v[i], v[i + 1]) == 0) {
			v[(*n)++] = v[i];
			free(v[++i]);
			continue;
		}
		if (asprintf(&bin, "%s.bin", v[i]) < 0)
			mt_die(MT_EXIT_IO, "out of memory");
		mt_die(MT_EXIT_IO, "'%s%s' is missing: every dataset in --input '%s' needs both .bin and .idx", v[i],
		       is_file(bin) ? ".idx" : ".bin", dir);
	}
	if (*n == 0)
		mt_die(MT_EXIT_IO, "no datasets in --input '%s' (no PREFIX.bin with its PREFIX.idx)", dir);
	return v;
}

struct merge_progress {
	struct mt_progress meter;
	int64_t base; /* .bin bytes of the datasets already merged */
	int64_t done; /* datasets already merged */
};

static void merge_progress(void *ctx, int64_t bytes)
{
	struct merge_progress *p = ctx;

	mt_progress_update(&p->meter, p->base + bytes, p->done);
}

/* The same file under two names? (The output must not be one of the inputs.) */
static int same_file(const char *x, const char *y)
{
	struct stat a, b;

	return stat(x, &a) == 0 && stat(y, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static int cmd_merge(struct mt_opt *o, struct args *a)
{
	struct mt_idx_writer *w;
	struct merge_progress p = { 0 };
	struct mt_err e = { 0 };
	char **inputs, *out_idx, *out_bin, *first = NULL;
	int n, dtype = 0;
	int64_t total = 0;
	double t0 = mt_now();

	parse(o, a);
	inputs = (char **)a->prefixes;
	n = a->nprefixes;
	if (!a->output)
		mt_die_usage(o, "--output-prefix is required");
	if (a->input_dir && n)
		mt_die_usage(o, "give either PREFIX... or --input DIR, not both");
	if (!a->input_dir && !n)
		mt_die_usage(o, "nothing to merge: give PREFIX... or --input DIR");
	if (a->input_dir)
		inputs = list_dir(a->input_dir, &n);
	if (asprintf(&out_idx, "%s.idx", a->output) < 0 || asprintf(&out_bin, "%s.bin", a->output) < 0)
		mt_die(MT_EXIT_IO, "out of memory");

	/* first pass: every input readable and sound, one dtype, none of them the output;
	 * the inputs are closed again so that thousands of shards need no thousands of maps */
	for (int i = 0; i < n; i++) {
		struct mt_idx *ix = open_checked(inputs[i]);

		if (i == 0) {
			dtype = ix->dtype;
			if (!(first = strdup(ix->idx_path)))
				mt_die(MT_EXIT_IO, "out of memory");
		} else if (ix->dtype != dtype) {
			mt_die(MT_EXIT_DATA, "'%s' has dtype %s but '%s' has %s: datasets merged together must share a dtype",
			       ix->idx_path, mt_idx_dtype_name(ix->dtype), first, mt_idx_dtype_name(dtype));
		}
		if (same_file(ix->idx_path, out_idx) || same_file(ix->bin_path, out_bin))
			mt_die(MT_EXIT_USAGE, "--output-prefix '%s' is also the input '%s': write the merge elsewhere",
			       a->output, ix->prefix);
		total += (int64_t)ix->bin_size;
		mt_idx_close(ix);
	}

	if (mt_idx_writer_open(&w, a->output, dtype, &e))
		mt_die_err(&e);
	mt_progress_init(&p.meter, info.name, "datasets", total, o->quiet);
	mt_idx_writer_set_progress(w, merge_progress, &p);
	for (int i = 0; i < n; i++) {
		struct mt_idx *ix = open_checked(inputs[i]); /* again: what is merged is what was checked */

		if (mt_idx_writer_add_index(w, ix, &e)) {
			mt_idx_writer_abort(w);
			mt_progress_done(&p.meter);
			mt_die_err(&e);
		}
		p.base += (int64_t)ix->bin_size;
		p.done++;
		mt_idx_close(ix);
	}
	mt_progress_done(&p.meter);
	{
		int64_t docs = mt_idx_writer_documents(w), seqs = mt_idx_writer_sequences(w);
		int64_t toks = mt_idx_writer_tokens(w);

		if (mt_idx_writer_commit(w, &e))
			mt_die_err(&e);
		mt_info("merged %d dataset%s: %lld documents, %lld sequences, %lld tokens (%s) into %s.{bin,idx} in %.2f s",
			n, n == 1 ? "" : "s", (long long)docs, (long long)seqs, (long long)toks,
			mt_idx_dtype_name(dtype), a->output, mt_now() - t0);
	}
	free(out_idx);
	free(out_bin);
	free(first);
	return MT_EXIT_OK;
}

/* cat ----------------------------------------------------------------------- */

/* --docs A:B, A:, :B, : or A, checked against the dataset's ndocs documents. */
static void parse_docs(struct mt_opt *o, const char *s, const char *name, int64_t ndocs, int64_t *from, int64_t *to)
{
	const char *colon = strchr(s, ':');
	char lo[32] = "";
	long long a = 0, b = ndocs;

	if (colon) {
		if ((size_t)(colon - s) >= sizeof(lo))
			mt_die_usage(o, "--docs wants A:B (document numbers), not '%s'", s);
		memcpy(lo, s, (size_t)(colon - s));
		if ((lo[0] && mt_parse_ll(lo, &a)) || (colon[1] && mt_parse_ll(colon + 1, &b)))
			mt_die_usage(o, "--docs wants A:B (document numbers), not '%s'", s);
	} else {
		if (mt_parse_ll(s, &a))
			mt_die_usage(o, "--docs wants A:B (document numbers), not '%s'", s);
		b = a + (a < INT64_MAX);
	}
	if (a < 0 || b < 0)
		mt_die_usage(o, "--docs '%s': document numbers start at 0", s);
	if (a > b)
		mt_die_usage(o, "--docs '%s': the range ends before it starts", s);
	if (b > ndocs)
		mt_die_usage(o, "--docs '%s': '%s' has %lld documents (0 to %lld)", s, name, (long long)ndocs,
			     (long long)ndocs - 1);
	*from = a;
	*to = b;
}

/* Integers to text without printf, for long documents of ids. */
static char *put_i64(char *p, int64_t v)
{
	char tmp[24];
	int n = 0;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

	if (v < 0)
		*p++ = '-';
	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	while (n)
		*p++ = tmp[--n];
	return p;
}

struct outbuf {
	char *a;
	size_t n, cap;
};

static void out_reserve(struct outbuf *b, size_t more)
{
	if (b->n + more > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;

		while (cap < b->n + more)
			cap *= 2;
		if (!(b->a = realloc(b->a, cap)))
			mt_die(MT_EXIT_IO, "out of memory");
		b->cap = cap;
	}
}

static void out_str(struct outbuf *b, const char *s)
{
	size_t n = strlen(s);

	out_reserve(b, n);
	memcpy(b->a + b->n, s, n);
	b->n += n;
}

static void out_write(struct outbuf *b)
{
	if (b->n && fwrite(b->a, 1, b->n, stdout) != b->n)
		mt_die(MT_EXIT_IO, "cannot write to stdout");
	b->n = 0;
}

/* Document d as ids: "1 2 | 3" (sequences separated by " | ", as idx-dump), or
 * {"doc":d,"ids":[1,2,3],"lengths":[2,1]}. */
static void cat_ids(struct outbuf *b, const struct mt_idx *ix, int64_t d, int json)
{
	int64_t first = mt_idx_doc(ix, d), end = mt_idx_doc(ix, d + 1), k = 0;

	if (json) {
		out_reserve(b, 48);
		b->n += (size_t)snprintf(b->a + b->n, 48, "{\"doc\":%lld,\"ids\":[", (long long)d);
	}
	for (int64_t s = first; s < end; s++) {
		int32_t n = mt_idx_seq_len(ix, s);

		if (!json && s > first)
			out_str(b, " | ");
		for (int32_t j = 0; j < n; j++, k++) {
			out_reserve(b, 24);
			if (json ? k > 0 : j > 0)
				b->a[b->n++] = json ? ',' : ' ';
			b->n = (size_t)(put_i64(b->a + b->n, mt_idx_token(ix, s, j)) - b->a);
		}
	}
	if (json) {
		out_str(b, "],\"lengths\":[");
		for (int64_t s = first; s < end; s++) {
			out_reserve(b, 24);
			if (s > first)
				b->a[b->n++] = ',';
			b->n = (size_t)(put_i64(b->a + b->n, mt_idx_seq_len(ix, s)) - b->a);
		}
		out_str(b, "]}");
	}
	out_str(b, "\n");
}

/* What cat keeps between documents. */
struct cat {
	struct outbuf out;
	struct mt_ids ids;
	char *text, *fixed;   /* decoded text; the same made valid UTF-8 (--json) */
	size_t text_cap, fixed_cap;
};

/* Document d decoded: its sequences' text end to end, then a newline; or
 * {"doc":d,"text":"..."} with invalid UTF-8 replaced by U+FFFD. */
static void cat_text(struct cat *c, const struct mt_idx *ix, int64_t d, int json, const struct mt_vocab *v)
{
	struct outbuf *b = &c->out;
	struct mt_err e = { 0 };
	size_t len = 0, replaced, n;
	json_t *o;
	char *js;

	c->ids.n = 0;
	for (int64_t s = mt_idx_doc(ix, d); s < mt_idx_doc(ix, d + 1); s++)
		for (int32_t j = 0; j < mt_idx_seq_len(ix, s); j++) {
			int64_t t = mt_idx_token(ix, s, j);

			if (t < 0 || t > INT32_MAX)
				mt_die(MT_EXIT_DATA, "'%s' document %lld: %lld is not a token id", ix->prefix, (long long)d,
				       (long long)t);
			if (mt_ids_push(&c->ids, (int32_t)t))
				mt_die(MT_EXIT_IO, "out of memory");
		}
	if (!json) {
		/* straight into the output buffer */
		len = b->n;
		if (mt_bpe_decode(v, c->ids.a, c->ids.n, &b->a, &len, &b->cap, &e))
			mt_die(MT_EXIT_DATA, "'%s' document %lld: %s", ix->prefix, (long long)d, e.msg);
		b->n = len;
		out_str(b, "\n");
		return;
	}
	if (mt_bpe_decode(v, c->ids.a, c->ids.n, &c->text, &len, &c->text_cap, &e))
		mt_die(MT_EXIT_DATA, "'%s' document %lld: %s", ix->prefix, (long long)d, e.msg);
	if (3 * len + 1 > c->fixed_cap) {
		c->fixed_cap = 3 * len + 1;
		if (!(c->fixed = realloc(c->fixed, c->fixed_cap)))
			mt_die(MT_EXIT_IO, "out of memory");
	}
	n = mt_utf8_repair(c->text ? c->text : "", len, c->fixed, &replaced);
	if (!(o = json_object()))
		mt_die(MT_EXIT_IO, "out of memory");
	json_object_set_new(o, "doc", json_integer(d));
	json_object_set_new(o, "text", json_stringn(c->fixed, n));
	if (!(js = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER)))
		mt_die(MT_EXIT_IO, "out of memory");
	out_str(b, js);
	out_str(b, "\n");
	free(js);
	json_decref(o);
}

static int cmd_cat(struct mt_opt *o, struct args *a)
{
	struct mt_tokenizer t;
	struct cat c = { 0 };
	struct mt_err e = { 0 };
	struct mt_idx *ix;
	int64_t from, to;
	int decode;

	parse(o, a);
	if (a->nprefixes != 1)
		mt_die_usage(o, a->nprefixes ? "cat takes one PREFIX" : "cat needs a PREFIX");
	decode = a->tok.type != NULL;
	if (a->decode && !decode)
		mt_die_usage(o, "--decode needs a tokenizer: --tokenizer-type and its files");
	if (!decode && (a->tok.vocab_file || a->tok.merge_file || a->tok.tokenizer_model || a->tok.pattern))
		mt_die_usage(o, "tokenizer files without --tokenizer-type");
	ix = open_checked(a->prefixes[0]);
	from = 0;
	to = ix->ndoc_idx - 1;
	if (a->docs)
		parse_docs(o, a->docs, ix->prefix, ix->ndoc_idx - 1, &from, &to);
	if (decode && mt_tokenizer_load(&t, &a->tok, &e))
		mt_die_err(&e);
	for (int64_t d = from; d < to; d++) {
		if (decode)
			cat_text(&c, ix, d, a->json, &t.vocab);
		else
			cat_ids(&c.out, ix, d, a->json);
		if (c.out.n >= (1 << 20))
			out_write(&c.out);
	}
	out_write(&c.out);
	flush_stdout();
	if (decode)
		mt_tokenizer_free(&t);
	mt_ids_free(&c.ids);
	free(c.out.a);
	free(c.text);
	free(c.fixed);
	mt_idx_close(ix);
	return MT_EXIT_OK;
}

/* main ---------------------------------------------------------------------- */

static const struct mt_option build_opts[] = {
	MT_DATA_OPTIONS,
	{ "json", 0, MT_ARG_NONE, O_JSON, NULL, "print the splits as JSON" },
	{ 0 },
};

/* The indices of every split, through the same plan as mt-blend and mt-train. */
static int cmd_build(struct mt_opt *o, struct args *a)
{
	struct mt_dataopts d;
	struct mt_plan p;
	struct mt_err e = { 0 };
	int id, json = 0;

	(void)a;
	mt_dataopts_init(&d);
	while ((id = mt_opt_next(o)) != MT_OPT_END) {
		mt_tool_common(o, id);
		if (mt_dataopts_take(&d, o, id))
			continue;
		if (id == O_JSON)
			json = 1;
		else if (id == MT_OPT_ARG)
			mt_die_usage(o, "unexpected argument '%s'", o->arg);
	}
	mt_dataopts_finish(&d, o);
	if (mt_plan_make(&d.args, MT_PLAN_WRITE, &p, &e))
		mt_die_err(&e);
	mt_dataopts_print_plan(&d, &p, json, stdout);
	if (!o->quiet)
		mt_info("index caches written to %s", d.cache ? d.cache : "PREFIX/cache/GPTDataset_indices beside each dataset");
	mt_plan_free(&p);
	mt_dataopts_free(&d);
	return fflush(stdout) ? MT_EXIT_IO : MT_EXIT_OK;
}

static const struct command {
	const char *name;
	const struct mt_option *opts;
	int (*run)(struct mt_opt *, struct args *);
} commands[] = {
	{ "stat", stat_opts, cmd_stat },
	{ "verify", verify_opts, cmd_verify },
	{ "merge", merge_opts, cmd_merge },
	{ "cat", cat_opts, cmd_cat },
	{ "build", build_opts, cmd_build },
};

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct args a;
	const struct command *cmd = NULL;
	const char *words[sizeof(commands) / sizeof(commands[0]) + 1] = { NULL };
	int id;

	mt_tool_start(&info);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		words[i] = commands[i].name;
	mt_tool_command_first(argc, argv, words);
	memset(&a, 0, sizeof(a));
	if (argc > 1 && argv[1][0] != '-') {
		for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
			if (strcmp(argv[1], commands[i].name) == 0)
				cmd = &commands[i];
		if (!cmd) {
			mt_opt_init(&o, &info, no_opts, argc, argv);
			mt_die_usage(&o, "unknown command '%s' (stat, verify, merge, cat or build)", argv[1]);
		}
		argv[1] = argv[0];
		argv++;
		argc--;
		if (mt_opt_init(&o, &info, cmd->opts, argc, argv))
			mt_die_err(&o.err);
		return cmd->run(&o, &a);
	}
	/* no command: --help, --version and bad options answer as usual */
	if (mt_opt_init(&o, &info, no_opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id == MT_OPT_ARG)
			break;
	}
	mt_die_usage(&o, "a command is required: stat, verify, merge, cat or build");
}
