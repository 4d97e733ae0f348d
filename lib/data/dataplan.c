/* dataplan.c: Megatron's dataset builder decisions, split by split (see dataplan.h). */
#include "data/dataplan.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic.h"
#include "base/log.h"
#include "data/npy.h"
#include "base/pyjson.h"

const char *const mt_split_names[MT_NSPLITS] = { "train", "valid", "test" };

static void split_free(struct mt_plan_split *s)
{
	for (int i = 0; i < s->nsrc; i++) {
		for (int k = 0; k < MT_NSPLITS; k++)
			mt_gpt_indices_free(&s->src[i].use[k].x);
		free(s->src[i].path);
		if (s->src[i].ix)
			mt_idx_close(s->src[i].ix);
		free(s->src[i].lens);
	}
	free(s->src);
	free(s->dataset_index);
	free(s->dataset_sample_index);
	memset(s, 0, sizeof(*s));
}

void mt_plan_free(struct mt_plan *p)
{
	for (int s = 0; s < MT_NSPLITS; s++)
		split_free(&p->split[s]);
}

static int open_source(struct mt_plan_source *src, const char *path, struct mt_err *err)
{
	src->path = strdup(path);
	if (!src->path)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (mt_idx_open(&src->ix, path, err))
		return -1;
	src->lens = malloc((size_t)(src->ix->nseq ? src->ix->nseq : 1) * sizeof(int32_t));
	if (!src->lens)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int64_t i = 0; i < src->ix->nseq; i++)
		src->lens[i] = mt_idx_seq_len(src->ix, i);
	return 0;
}

/* The cache text of a BlendedDataset: its children's descriptions nested. */
static char *blend_description(const struct mt_plan_split *sp, const char *split_name, char **child_desc,
			       char md5hex[33], struct mt_err *err)
{
	struct mt_pyjson j;

	mt_pyjson_init(&j);
	mt_pyjson_begin_object(&j);
	mt_pyjson_key(&j, "class");
	mt_pyjson_string(&j, "BlendedDataset");
	mt_pyjson_key(&j, "datasets");
	mt_pyjson_begin_array(&j);
	for (int i = 0; i < sp->nsrc; i++) {
		json_error_t je;
		json_t *v = json_loads(child_desc[i], 0, &je);
		mt_pyjson_value(&j, v);
		json_decref(v);
	}
	mt_pyjson_end_array(&j);
	mt_pyjson_key(&j, "split");
	mt_pyjson_string(&j, split_name);
	mt_pyjson_key(&j, "weights");
	mt_pyjson_begin_array(&j);
	for (int i = 0; i < sp->nsrc; i++)
		mt_pyjson_float(&j, sp->src[i].weight);
	mt_pyjson_end_array(&j);
	mt_pyjson_key(&j, "size");
	mt_pyjson_int(&j, sp->size);
	mt_pyjson_end_object(&j);
	if (j.oom) {
		mt_pyjson_free(&j);
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		return NULL;
	}
	mt_md5_hex(j.s, j.n, md5hex);
	return j.s;
}

static int make_split(const struct mt_plan_args *a, struct mt_plan *p, int s, int flags, struct mt_err *err)
{
	struct mt_plan_split *sp = &p->split[s];
	const struct mt_blend_spec *b = a->per_split[s] ? a->per_split[s] : a->blend;
	int per_split = a->per_split[s] != NULL;
	double *w = NULL;
	char **desc = NULL;
	int64_t sum_target = 0, sum_built = 0;
	int rc = -1;

	if (!b || a->samples[s] < 0)
		return 0;
	sp->nsrc = b->n;
	sp->src = calloc((size_t)b->n, sizeof(*sp->src));
	w = malloc((size_t)b->n * sizeof(*w));
	desc = calloc((size_t)b->n, sizeof(*desc));
	if (!sp->src || !w || !desc) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	mt_blend_normalized(b, w);
	/* one path gives a plain GPTDataset: without a weight under --data-path, and with or
	 * without one in a per-split blend (Megatron ignores that weight) */
	sp->blended = b->n > 1 || (b->weighted && !per_split);
	for (int i = 0; i < b->n; i++) {
		struct mt_plan_source *src = &sp->src[i];
		struct mt_plan_use *u = &src->use[s];
		struct mt_gpt_range r[3];

		if (open_source(src, b->src[i].path, err))
			goto out;
		src->weight = w[i];
		if (per_split) {
			u->range = (struct mt_gpt_range){ 0, src->ix->nseq, 1, 0, 1, 1 };
		} else {
			mt_gpt_split_ranges(p->split_w, src->ix->nseq, r);
			u->range = r[s];
		}
		u->present = u->range.present;
		if (!u->present)
			continue;
		if (u->range.end <= u->range.beg) {
			/* a split too small to hold a document: served by nothing, said aloud */
			mt_warn("'%s': the %s split gets no documents (%lld in all): skipped", src->path,
				mt_split_names[s], (long long)src->ix->nseq);
			u->present = 0;
			continue;
		}
		u->documents = u->range.end - u->range.beg;
		for (int64_t k = u->range.beg; k < u->range.end; k++)
			u->tokens += src->lens[k];
	}
	for (int i = 0; i < b->n; i++)
		if (!sp->src[i].use[s].present) {
			rc = 0; /* the split has no weight, or no documents: Megatron's None */
			goto out;
		}
	sp->present = 1;
	if (!sp->blended) {
		sp->size = a->samples[s];
		sp->src[0].use[s].target = a->samples[s];
		sp->src[0].use[s].samples = a->samples[s];
	} else if (b->weighted) {
		int64_t *tg = malloc((size_t)b->n * sizeof(*tg)), *mid = malloc((size_t)b->n * sizeof(*mid));
		if (!tg || !mid) {
			free(tg);
			free(mid);
			mt_err_set(err, MT_EXIT_IO, "out of memory");
			goto out;
		}
		mt_blend_targets(w, b->n, a->samples[s], a->surplus, tg, mid);
		for (int i = 0; i < b->n; i++) {
			sp->src[i].use[s].target = tg[i];
			sp->src[i].use[s].samples = mid[i];
			sum_target += tg[i];
		}
		free(tg);
		free(mid);
		sp->size = sum_target;
		/* the BlendedDataset normalizes the builder's weights once more */
		mt_blend_normalize(w, b->n);
		for (int i = 0; i < b->n; i++)
			sp->src[i].weight = w[i];
	} else {
		for (int i = 0; i < b->n; i++)
			sp->src[i].use[s].samples = -1; /* one epoch each */
	}

	/* every source's GPTDataset */
	for (int i = 0; i < b->n; i++) {
		struct mt_plan_source *src = &sp->src[i];
		struct mt_plan_use *u = &src->use[s];
		struct mt_gpt_params gp = { u->samples, a->seq_length, a->seed, a->add_extra_token, a->drop_last };
		struct mt_gpt_indices x;
		struct mt_gpt_range r3[3];
		struct mt_gpt_desc d = { src->path, u->samples, mt_split_names[s], a->seed, a->seq_length,
					 per_split ? NULL : (a->split ? a->split : "969, 30, 1"), NULL, a->tokenizer_json };
		char dir[4096];

		char why[600];
		int cached;

		if (!per_split) {
			mt_gpt_split_ranges(p->split_w, src->ix->nseq, r3);
			d.split_matrix = r3;
		}
		if (a->cache_dir)
			snprintf(dir, sizeof(dir), "%s", a->cache_dir);
		else
			mt_gpt_cache_dir(dir, sizeof(dir), src->path);
		/* an existing cache (Megatron's or ours) is read when it passes the checks, on
		 * every rank; one that fails them is rebuilt (and rewritten with MT_PLAN_WRITE) */
		cached = mt_gpt_read_cache(dir, &d, src->lens, u->range.beg, u->range.end, &gp, &x, why, sizeof(why), err);
		if (cached < 0) {
			mt_err_prefix(err, "'%s' (%s split)", src->path, mt_split_names[s]);
			goto out;
		}
		if (!cached && why[0])
			mt_warn("index cache not used, rebuilding it: %s", why);
		if (!cached && mt_gpt_build(src->lens, u->range.beg, u->range.end, &gp, &x, err)) {
			mt_err_prefix(err, "'%s' (%s split)", src->path, mt_split_names[s]);
			goto out;
		}
		u->built = x.nsample;
		u->epochs = x.epochs;
		u->separate_final_epoch = x.separate_final_epoch;
		sum_built += x.nsample;
		desc[i] = mt_gpt_description(&d, u->md5, err);
		if (!desc[i]) {
			mt_gpt_indices_free(&x);
			goto out;
		}
		if ((flags & MT_PLAN_WRITE) && cached) {
			/* reused as it is: only a dead writer's leftovers beside it are removed, as a
			 * write would remove them (atomic.h) */
			static const char *const files[] = { "description.txt", "document_index.npy", "sample_index.npy",
							     "shuffle_index.npy" };
			for (int k = 0; k < 4; k++) {
				char path[4300];
				snprintf(path, sizeof(path), "%s/%s-GPTDataset-%s-%s", dir, u->md5, d.index_split, files[k]);
				mt_atomic_sweep(path);
			}
		}
		if ((flags & MT_PLAN_WRITE) && !cached) {
			if (mt_gpt_write_cache(dir, &d, &x, u->md5, err)) {
				mt_gpt_indices_free(&x);
				goto out;
			}
		}
		if (flags & MT_PLAN_KEEP)
			u->x = x;
		else
			mt_gpt_indices_free(&x);
	}
	if (!sp->blended) {
		sp->src[0].use[s].realized = sp->src[0].use[s].built;
		sp->size = sp->src[0].use[s].built;
		rc = 0;
		goto out;
	}
	if (!b->weighted) {
		/* weights are the datasets' lengths; the blend is no longer than they are together */
		for (int i = 0; i < b->n; i++)
			w[i] = (double)sp->src[i].use[s].built;
		mt_blend_normalize(w, b->n);
		for (int i = 0; i < b->n; i++)
			sp->src[i].weight = w[i];
		sp->size = a->samples[s] < sum_built ? a->samples[s] : sum_built;
	}
	if (mt_blend_indices(w, b->n, sp->size, &sp->dataset_index, &sp->wide, &sp->dataset_sample_index, err))
		goto out;
	for (int64_t k = 0; k < sp->size; k++) {
		int d = sp->wide ? ((int32_t *)sp->dataset_index)[k] : ((int16_t *)sp->dataset_index)[k];
		sp->src[d].use[s].realized++;
	}
	for (int i = 0; i < b->n; i++)
		if (sp->src[i].use[s].realized > sp->src[i].use[s].built) {
			mt_err_set(err, MT_EXIT_DATA, "'%s': the blend needs %lld samples of it, its dataset has %lld",
				   sp->src[i].path, (long long)sp->src[i].use[s].realized, (long long)sp->src[i].use[s].built);
			goto out;
		}
	{
		char *bd = blend_description(sp, mt_split_names[s], desc, sp->md5, err);
		if (!bd)
			goto out;
		if ((flags & MT_PLAN_WRITE) && a->cache_dir) {
			char path[4200];
			if (mt_mkdir_p(a->cache_dir, err)) {
				free(bd);
				goto out;
			}
#define NAME(what) snprintf(path, sizeof(path), "%s/%s-BlendedDataset-%s-%s", a->cache_dir, sp->md5, mt_split_names[s], what)
			NAME("dataset_index.npy");
			if (mt_npy_write(path, sp->wide ? "<i4" : "<i2", sp->dataset_index, (size_t)sp->size, 0, err)) {
				free(bd);
				goto out;
			}
			NAME("dataset_sample_index.npy");
			if (mt_npy_write(path, "<i8", sp->dataset_sample_index, (size_t)sp->size, 0, err)) {
				free(bd);
				goto out;
			}
			NAME("description.txt");
			const void *part = bd;
			size_t len = strlen(bd);
			if (!mt_atomic_same(path, &part, &len, 1) && mt_atomic_write_file(path, bd, len, err)) {
				free(bd);
				goto out;
			}
#undef NAME
		}
		free(bd);
	}
	rc = 0;
out:
	for (int i = 0; desc && i < b->n; i++)
		free(desc[i]);
	free(desc);
	free(w);
	return rc;
}

int mt_plan_make(const struct mt_plan_args *a, int flags, struct mt_plan *p, struct mt_err *err)
{
	memset(p, 0, sizeof(*p));
	p->seq_length = a->seq_length;
	p->add_extra_token = a->add_extra_token;
	if (a->seq_length <= 0)
		return mt_err_set(err, MT_EXIT_USAGE, "--seq-length is required and must be positive");
	if (a->blend) {
		if (mt_gpt_parse_split(a->split ? a->split : "969, 30, 1", p->split_w, err))
			return -1;
		p->have_split = 1;
	}
	for (int s = 0; s < MT_NSPLITS; s++)
		if (make_split(a, p, s, flags, err)) {
			mt_plan_free(p);
			return -1;
		}
	return 0;
}

/* One GPTDataset sample: shuffle, then the (document, offset) rows it starts and ends at. */
static int gpt_sample(const struct mt_plan_source *src, const struct mt_plan_use *u, int64_t idx, int64_t L, int X,
		      int32_t *out, struct mt_err *err)
{
	const struct mt_gpt_indices *x = &u->x;
	int64_t i, d0, o0, d1, o1, k = 0, want = L + X;

	if (!x->shuffle || x->nshuffle == 0)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': no samples", src->path);
	idx %= x->nshuffle;
	i = x->shuffle_i64 ? ((int64_t *)x->shuffle)[idx] : ((uint32_t *)x->shuffle)[idx];
	if (x->sample_i64) {
		const int64_t *si = x->sample;
		d0 = si[2 * i], o0 = si[2 * i + 1], d1 = si[2 * i + 2], o1 = si[2 * i + 3];
	} else {
		const int32_t *si = x->sample;
		d0 = si[2 * i], o0 = si[2 * i + 1], d1 = si[2 * i + 2], o1 = si[2 * i + 3];
	}
	/* the indices were built here from checked lengths; still, nothing read from
	 * them is used before it is known to lie inside the arrays and the dataset */
	if (i < 0 || i >= x->nsample || d0 < 0 || d1 >= x->ndoc || d0 > d1 || o0 < 0)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': sample %lld points outside its indices", src->path,
				  (long long)idx);
	for (int64_t d = d0; d <= d1 && k < want; d++) {
		int64_t seq = x->doc[d], from = d == d0 ? o0 : 0;
		if (seq < 0 || seq >= src->ix->nseq)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': sample %lld names sequence %lld of %lld", src->path,
					  (long long)idx, (long long)seq, (long long)src->ix->nseq);
		int64_t to = d == d1 ? o1 + X : mt_idx_seq_len(src->ix, seq);
		if (to > mt_idx_seq_len(src->ix, seq))
			to = mt_idx_seq_len(src->ix, seq);
		for (int64_t j = from; j < to && k < want; j++)
			out[k++] = (int32_t)mt_idx_token(src->ix, seq, j);
	}
	while (k < want)
		out[k++] = -1; /* Megatron pads with the tokenizer's pad id, -1 without one */
	return 0;
}

int mt_plan_sample(const struct mt_plan *p, int split, int64_t idx, int32_t *out, struct mt_err *err)
{
	const struct mt_plan_split *sp = &p->split[split];
	int d = 0;
	int64_t k = idx;

	if (!sp->present || sp->size <= 0)
		return mt_err_set(err, MT_EXIT_DATA, "the %s split has no samples", mt_split_names[split]);
	if (idx < 0) /* a negative sample counter, e.g. from a damaged checkpoint */
		return mt_err_set(err, MT_EXIT_DATA, "the %s split's sample %lld: negative", mt_split_names[split],
				  (long long)idx);
	idx %= sp->size;
	if (sp->blended) {
		d = sp->wide ? ((int32_t *)sp->dataset_index)[idx] : ((int16_t *)sp->dataset_index)[idx];
		k = sp->dataset_sample_index[idx];
		if (d < 0 || d >= sp->nsrc || k < 0)
			return mt_err_set(err, MT_EXIT_DATA, "the %s blend's sample %lld names dataset %d of %d",
					  mt_split_names[split], (long long)idx, d, sp->nsrc);
	} else {
		k = idx;
	}
	return gpt_sample(&sp->src[d], &sp->src[d].use[split], k, p->seq_length, p->add_extra_token, out, err);
}
