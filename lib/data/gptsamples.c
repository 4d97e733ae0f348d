/* gptsamples.c: GPTDataset index building and its cache files (see gptsamples.h). */
#include "data/gptsamples.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <nettle/md5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/atomic.h"
#include "base/mt19937.h"
#include "data/npy.h"
#include "base/pyjson.h"

int mt_gpt_parse_split(const char *split, double w[3], struct mt_err *err)
{
	/* the numbers matching [.0-9]+, padded with zeros to three, over their sum */
	const char *p = split;
	int n = 0;
	double sum = 0;

	w[0] = w[1] = w[2] = 0;
	while (*p) {
		if ((*p >= '0' && *p <= '9') || *p == '.') {
			const char *q = p;
			char num[64];
			char *end;
			while ((*q >= '0' && *q <= '9') || *q == '.')
				q++;
			if (n == 3 || (size_t)(q - p) >= sizeof(num))
				return mt_err_set(err, MT_EXIT_USAGE, "--split '%s': at most three numbers", split);
			memcpy(num, p, (size_t)(q - p));
			num[q - p] = '\0';
			w[n] = strtod(num, &end);
			if (*end)
				return mt_err_set(err, MT_EXIT_USAGE, "--split '%s': '%s' is not a number", split, num);
			sum += w[n++];
			p = q;
		} else {
			p++;
		}
	}
	if (n == 0 || sum <= 0)
		return mt_err_set(err, MT_EXIT_USAGE, "--split '%s': needs positive weights, e.g. 969,30,1", split);
	for (int i = 0; i < 3; i++)
		w[i] /= sum;
	return 0;
}

/* Python's round(): halves to even. */
static int64_t round_half_even(double x)
{
	double f = floor(x), d = x - f;

	if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0))
		f += 1;
	return (int64_t)f;
}

void mt_gpt_split_ranges(const double w[3], int64_t nseq, struct mt_gpt_range r[3])
{
	double book[4];

	book[0] = 0;
	for (int i = 0; i < 3; i++)
		book[i + 1] = book[i] + w[i];
	for (int i = 0; i < 3; i++) {
		r[i].lo = book[i];
		r[i].hi = book[i + 1];
		r[i].lo_is_int = i == 0;
		r[i].present = book[i + 1] > book[i];
		r[i].beg = round_half_even(book[i] * (double)nseq);
		r[i].end = round_half_even(book[i + 1] * (double)nseq);
	}
}

void mt_gpt_indices_free(struct mt_gpt_indices *x)
{
	free(x->doc);
	free(x->sample);
	free(x->shuffle);
	memset(x, 0, sizeof(*x));
}

/* The arithmetic of a build, before any array: tokens per epoch, epochs, the separate
 * final epoch, the longest document, the samples before the final epoch and in all. */
static int counts(const int32_t *lens, int64_t beg, int64_t end, const struct mt_gpt_params *p,
		  struct mt_gpt_indices *x, int64_t *maxlen, int64_t *sans, int64_t *ns, struct mt_err *err)
{
	int64_t n = p->num_samples, L = p->seq_length, X = p->add_extra_token, T = 0, E;

	*maxlen = 0;
	*sans = 0;
	if (end <= beg)
		return mt_err_set(err, MT_EXIT_DATA, "the split is empty");
	if (L <= 0)
		return mt_err_set(err, MT_EXIT_USAGE, "--seq-length must be positive");
	for (int64_t i = beg; i < end; i++) {
		T += lens[i];
		if (lens[i] > *maxlen)
			*maxlen = lens[i];
	}
	if (T <= X)
		return mt_err_set(err, MT_EXIT_DATA, "the split holds %lld tokens: too few for one sample", (long long)T);
	/* epochs: the fewest that cover n samples of L tokens (+X) */
	E = 1;
	if (n >= 0)
		while (E * T < n * L + X)
			E++;
	x->epochs = E;
	x->tokens_per_epoch = T;
	if (E > 1 && n >= 0) {
		int64_t per = (T - X) / L;
		*sans = ((E - 1) * T - X) / L;
		x->separate_final_epoch = (n - *sans) < (int64_t)(0.80 * (double)per);
	}
	if (p->drop_last)
		*ns = (E * T - X) / L;
	else /* Megatron computes this one in single precision */
		*ns = (int64_t)ceilf((float)(E * T - X) / (float)L);
	return 0;
}

int mt_gpt_build(const int32_t *lens, int64_t beg, int64_t end, const struct mt_gpt_params *p,
		 struct mt_gpt_indices *x, struct mt_err *err)
{
	struct mt_mt19937 rng;
	int64_t L = p->seq_length, X = p->add_extra_token, E, nd, ns, maxlen = 0, sans = 0;

	memset(x, 0, sizeof(*x));
	if (counts(lens, beg, end, p, x, &maxlen, &sans, &ns, err))
		return -1;
	E = x->epochs;

	/* document_index: the split's sequence ids, epoch after epoch, shuffled */
	nd = E * (end - beg);
	if (nd > INT32_MAX)
		return mt_err_set(err, MT_EXIT_DATA, "%lld documents over %lld epochs: beyond Megatron's int32 document index",
				  (long long)(end - beg), (long long)E);
	x->ndoc = nd;
	x->doc = malloc((size_t)nd * sizeof(int32_t));
	if (!x->doc)
		goto oom;
	for (int64_t e = 0, k = 0; e < E; e++)
		for (int64_t i = beg; i < end; i++)
			x->doc[k++] = (int32_t)i;
	mt_mt19937_seed(&rng, p->seed);
	if (x->separate_final_epoch) {
		int64_t first = (E - 1) * (end - beg);
		mt_mt19937_shuffle(&rng, x->doc, (size_t)first, 4);
		mt_mt19937_shuffle(&rng, x->doc + first, (size_t)(nd - first), 4);
	} else {
		mt_mt19937_shuffle(&rng, x->doc, (size_t)nd, 4);
	}

	/* sample_index: where each sample starts, as (position in document_index, offset) */
	x->nsample = ns;
	x->sample_i64 = nd > INT32_MAX || maxlen > INT32_MAX;
	x->sample = malloc((size_t)(ns + 1) * 2 * (x->sample_i64 ? 8 : 4));
	if (!x->sample)
		goto oom;
	{
		int64_t d = 0, off = 0;
		for (int64_t k = 0; k <= ns; k++) {
			if (k > 0) {
				int64_t rem = L + X;
				while (rem != 0) {
					int64_t dl = lens[x->doc[d]] - off;
					rem -= dl;
					if (rem <= 0) {
						off += rem + dl - X;
						rem = 0;
					} else if (d == nd - 1) {
						off = lens[x->doc[d]] - X;
						break;
					} else {
						d++;
						off = 0;
					}
				}
			}
			if (x->sample_i64) {
				((int64_t *)x->sample)[2 * k] = d;
				((int64_t *)x->sample)[2 * k + 1] = off;
			} else {
				((int32_t *)x->sample)[2 * k] = (int32_t)d;
				((int32_t *)x->sample)[2 * k + 1] = (int32_t)off;
			}
		}
	}

	/* shuffle_index: the order samples are served in; the generator carries on */
	x->nshuffle = ns;
	x->shuffle_i64 = ns >= (int64_t)UINT32_MAX - 1;
	x->shuffle = malloc((size_t)(ns ? ns : 1) * (x->shuffle_i64 ? 8 : 4));
	if (!x->shuffle)
		goto oom;
	for (int64_t i = 0; i < ns; i++) {
		if (x->shuffle_i64)
			((int64_t *)x->shuffle)[i] = i;
		else
			((uint32_t *)x->shuffle)[i] = (uint32_t)i;
	}
	{
		int64_t first = x->separate_final_epoch ? sans : ns;
		size_t isz = x->shuffle_i64 ? 8 : 4;
		if (first > ns)
			first = ns;
		mt_mt19937_shuffle(&rng, x->shuffle, (size_t)first, isz);
		if (first < ns)
			mt_mt19937_shuffle(&rng, (char *)x->shuffle + (size_t)first * isz, (size_t)(ns - first), isz);
	}
	return 0;
oom:
	mt_gpt_indices_free(x);
	return mt_err_set(err, MT_EXIT_IO, "out of memory for the sample indices");
}

void mt_md5_hex(const void *data, size_t n, char out[33])
{
	struct md5_ctx c;
	uint8_t d[MD5_DIGEST_SIZE];

	md5_init(&c);
	md5_update(&c, n, data);
	md5_digest(&c, sizeof(d), d);
	for (int i = 0; i < MD5_DIGEST_SIZE; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

char *mt_gpt_description(const struct mt_gpt_desc *d, char md5hex[33], struct mt_err *err)
{
	struct mt_pyjson j;
	json_t *tok = NULL;
	json_error_t je;

	if (d->tokenizer_json) {
		tok = json_loads(d->tokenizer_json, JSON_DECODE_ANY, &je);
		if (!tok || !json_is_object(tok)) {
			json_decref(tok);
			mt_err_set(err, MT_EXIT_USAGE, "tokenizer identifiers: not a JSON object: %s",
				   tok ? "another kind of value" : je.text);
			return NULL;
		}
	}
	mt_pyjson_init(&j);
	mt_pyjson_begin_object(&j);
	mt_pyjson_key(&j, "class");
	mt_pyjson_string(&j, "GPTDataset");
	mt_pyjson_key(&j, "dataset_path");
	mt_pyjson_string(&j, d->dataset_path);
	mt_pyjson_key(&j, "num_samples");
	if (d->num_samples < 0)
		mt_pyjson_null(&j);
	else
		mt_pyjson_int(&j, d->num_samples);
	mt_pyjson_key(&j, "index_split");
	mt_pyjson_string(&j, d->index_split);
	mt_pyjson_key(&j, "random_seed");
	mt_pyjson_int(&j, d->seed);
	mt_pyjson_key(&j, "sequence_length");
	mt_pyjson_int(&j, d->seq_length);
	mt_pyjson_key(&j, "split");
	if (d->split)
		mt_pyjson_string(&j, d->split);
	else
		mt_pyjson_null(&j);
	mt_pyjson_key(&j, "split_matrix");
	if (d->split_matrix) {
		mt_pyjson_begin_array(&j);
		for (int i = 0; i < 3; i++) {
			const struct mt_gpt_range *r = &d->split_matrix[i];
			if (!r->present) {
				mt_pyjson_null(&j);
				continue;
			}
			mt_pyjson_begin_array(&j);
			if (r->lo_is_int)
				mt_pyjson_int(&j, (int64_t)r->lo);
			else
				mt_pyjson_float(&j, r->lo);
			mt_pyjson_float(&j, r->hi);
			mt_pyjson_end_array(&j);
		}
		mt_pyjson_end_array(&j);
	} else {
		mt_pyjson_null(&j);
	}
	mt_pyjson_key(&j, "tokenizer");
	if (tok)
		mt_pyjson_value(&j, tok);
	else
		mt_pyjson_null(&j);
	mt_pyjson_end_object(&j);
	json_decref(tok);
	if (j.oom) {
		mt_pyjson_free(&j);
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		return NULL;
	}
	mt_md5_hex(j.s, j.n, md5hex);
	return j.s; /* the caller frees it */
}

void mt_gpt_cache_dir(char *buf, size_t n, const char *prefix)
{
	snprintf(buf, n, "%s/cache/GPTDataset_indices", prefix);
}

int mt_mkdir_p(const char *dir, struct mt_err *err)
{
	char tmp[4096];
	size_t n = strlen(dir);

	if (n >= sizeof(tmp))
		return mt_err_set(err, MT_EXIT_USAGE, "path too long: '%s'", dir);
	memcpy(tmp, dir, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
			return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", tmp);
		*p = '/';
	}
	if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create directory '%s'", tmp);
	return 0;
}

int mt_gpt_write_cache(const char *dir, const struct mt_gpt_desc *d, const struct mt_gpt_indices *x,
		       char md5hex[33], struct mt_err *err)
{
	char path[4096], *desc = mt_gpt_description(d, md5hex, err);
	int rc = -1;

	if (!desc)
		return -1;
	if (mt_mkdir_p(dir, err))
		goto out;
#define NAME(what) snprintf(path, sizeof(path), "%s/%s-GPTDataset-%s-%s", dir, md5hex, d->index_split, what)
	/* arrays first, the description last: Megatron looks for all four */
	NAME("document_index.npy");
	if (mt_npy_write(path, "<i4", x->doc, (size_t)x->ndoc, 0, err))
		goto out;
	NAME("sample_index.npy");
	if (mt_npy_write(path, x->sample_i64 ? "<i8" : "<i4", x->sample, (size_t)x->nsample + 1, 2, err))
		goto out;
	NAME("shuffle_index.npy");
	if (mt_npy_write(path, x->shuffle_i64 ? "<i8" : "<u4", x->shuffle, (size_t)x->nshuffle, 0, err))
		goto out;
	NAME("description.txt");
	{
		const void *part = desc;
		size_t len = strlen(desc);
		if (!mt_atomic_same(path, &part, &len, 1) && mt_atomic_write_file(path, desc, len, err))
			goto out;
	}
#undef NAME
	rc = 0;
out:
	free(desc);
	return rc;
}

/* element k of a 1-D or 2-D integer .npy array, whatever its integer type */
static int64_t npy_at(const struct mt_npy *a, size_t k)
{
	switch (a->descr[1]) {
	case 'u':
		return a->itemsize == 4 ? (int64_t)((const uint32_t *)a->data)[k] : (int64_t)((const uint64_t *)a->data)[k];
	default:
		return a->itemsize == 4 ? (int64_t)((const int32_t *)a->data)[k] : ((const int64_t *)a->data)[k];
	}
}

int mt_gpt_read_cache(const char *dir, const struct mt_gpt_desc *d, const int32_t *lens, int64_t beg, int64_t end,
		      const struct mt_gpt_params *p, struct mt_gpt_indices *x, char *why, size_t nwhy,
		      struct mt_err *err)
{
	char path[4200], md5hex[33], *desc = mt_gpt_description(d, md5hex, err), *text = NULL;
	struct mt_npy doc = { 0 }, smp = { 0 }, shf = { 0 };
	struct mt_gpt_indices want = { 0 };
	struct mt_err e = { 0 };
	struct stat st;
	uint8_t *seen = NULL;
	int64_t maxlen, sans, ns, nd, ndocs = end - beg;
	int rc = -1;
	FILE *f;

	why[0] = '\0';
	memset(x, 0, sizeof(*x));
	if (!desc)
		return -1;
#define NAME(what) snprintf(path, sizeof(path), "%s/%s-GPTDataset-%s-%s", dir, md5hex, d->index_split, what)
#define BAD(...) do { snprintf(why, nwhy, __VA_ARGS__); rc = 0; goto out; } while (0)
	/* Megatron reads a cache when all four files are there */
	static const char *const files[] = { "description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy" };
	for (int i = 0; i < 4; i++) {
		NAME(files[i]);
		if (stat(path, &st) != 0) {
			rc = 0; /* no cache (or not all of it): build */
			goto out;
		}
	}
	if (counts(lens, beg, end, p, &want, &maxlen, &sans, &ns, err))
		goto out;
	nd = want.epochs * ndocs;
	NAME("description.txt");
	if (stat(path, &st) != 0 || !(f = fopen(path, "rb")))
		BAD("'%s' cannot be read", path);
	text = malloc((size_t)st.st_size + 1);
	if (!text || fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		fclose(f);
		BAD("'%s' cannot be read", path);
	}
	fclose(f);
	text[st.st_size] = '\0';
	if ((size_t)st.st_size != strlen(desc) || memcmp(text, desc, strlen(desc)))
		BAD("'%s' is not this dataset's description", path);
	NAME("document_index.npy");
	if (mt_npy_read(&doc, path, &e))
		BAD("%s", e.msg);
	if (strcmp(doc.descr, "<i4") || doc.cols || (int64_t)doc.rows != nd)
		BAD("'%s': %s [%zu], expected int32 [%lld] (%lld epochs of %lld documents)", path, doc.descr, doc.rows,
		    (long long)nd, (long long)want.epochs, (long long)ndocs);
	if (!(seen = calloc((size_t)(ndocs ? ndocs : 1), sizeof(int64_t))))
		BAD("out of memory");
	for (int64_t k = 0; k < nd; k++) {
		int64_t v = ((const int32_t *)doc.data)[k];
		if (v < beg || v >= end)
			BAD("'%s': document %lld at %lld is outside the split's [%lld, %lld)", path, (long long)v, (long long)k,
			    (long long)beg, (long long)end);
		if (++((int64_t *)seen)[v - beg] > want.epochs)
			BAD("'%s': document %lld appears more than %lld times", path, (long long)v, (long long)want.epochs);
	}
	NAME("sample_index.npy");
	if (mt_npy_read(&smp, path, &e))
		BAD("%s", e.msg);
	if ((strcmp(smp.descr, "<i4") && strcmp(smp.descr, "<i8")) || smp.cols != 2 || (int64_t)smp.rows != ns + 1)
		BAD("'%s': %s [%zu, %zu], expected [%lld, 2] of int32 or int64", path, smp.descr, smp.rows, smp.cols,
		    (long long)ns + 1);
	for (int64_t k = 0; k <= ns; k++) {
		int64_t dd = npy_at(&smp, (size_t)(2 * k)), off = npy_at(&smp, (size_t)(2 * k + 1));
		if (dd < 0 || dd >= nd || off < 0 || off > lens[((const int32_t *)doc.data)[dd]])
			BAD("'%s': sample %lld starts at (%lld, %lld), outside the documents", path, (long long)k, (long long)dd,
			    (long long)off);
		if (k && (dd < npy_at(&smp, (size_t)(2 * k - 2)) ||
			  (dd == npy_at(&smp, (size_t)(2 * k - 2)) && off < npy_at(&smp, (size_t)(2 * k - 1)))))
			BAD("'%s': sample %lld starts before sample %lld", path, (long long)k, (long long)k - 1);
	}
	NAME("shuffle_index.npy");
	if (mt_npy_read(&shf, path, &e))
		BAD("%s", e.msg);
	if ((strcmp(shf.descr, "<u4") && strcmp(shf.descr, "<i8")) || shf.cols || (int64_t)shf.rows != ns)
		BAD("'%s': %s [%zu], expected [%lld] of uint32 or int64", path, shf.descr, shf.rows, (long long)ns);
	free(seen);
	if (!(seen = calloc((size_t)(ns ? ns : 1), 1)))
		BAD("out of memory");
	for (int64_t k = 0; k < ns; k++) {
		int64_t v = npy_at(&shf, (size_t)k);
		if (v < 0 || v >= ns || seen[v]++)
			BAD("'%s': not a permutation of 0..%lld (%lld at %lld)", path, (long long)ns - 1, (long long)v, (long long)k);
	}
#undef BAD
#undef NAME
	/* sound: hand the arrays over */
	*x = want;
	x->doc = doc.data;
	x->ndoc = nd;
	x->sample = smp.data;
	x->nsample = ns;
	x->sample_i64 = smp.itemsize == 8;
	x->shuffle = shf.data;
	x->nshuffle = ns;
	x->shuffle_i64 = shf.itemsize == 8;
	doc.data = smp.data = shf.data = NULL;
	rc = 1;
out:
	mt_npy_free(&doc);
	mt_npy_free(&smp);
	mt_npy_free(&shf);
	free(seen);
	free(text);
	free(desc);
	return rc;
}
