/* dataopts.c: shared data options and the plan report (see dataopts.h). */
#include "dataopts.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/files.h"
#include "base/log.h"
#include "tool.h"

void mt_dataopts_init(struct mt_dataopts *d)
{
	memset(d, 0, sizeof(*d));
	d->seed = 1234;
	d->train_samples = d->train_iters = d->gbs = d->valid_samples = d->test_samples = -1;
	d->eval_interval = 1000;
	d->eval_iters = 100;
	d->surplus = 0.005;
}

static void add_list(struct mt_opt *o, const char **dst, int *n)
{
	for (int i = 0; i < o->nlist && *n < 256; i++)
		dst[(*n)++] = o->list[i];
}

int mt_dataopts_take(struct mt_dataopts *d, struct mt_opt *o, int id)
{
	switch (id) {
	case MT_DOPT_DATA_PATH: add_list(o, d->data, &d->ndata); return 1;
	case MT_DOPT_TRAIN_PATH: add_list(o, d->split_paths[0], &d->nsplit_paths[0]); return 1;
	case MT_DOPT_VALID_PATH: add_list(o, d->split_paths[1], &d->nsplit_paths[1]); return 1;
	case MT_DOPT_TEST_PATH: add_list(o, d->split_paths[2], &d->nsplit_paths[2]); return 1;
	case MT_DOPT_DATA_ARGS_PATH: d->data_args_path = o->arg; return 1;
	case MT_DOPT_PER_SPLIT_PATH: d->per_split_path = o->arg; return 1;
	case MT_DOPT_SPLIT: d->split = o->arg; return 1;
	case MT_DOPT_SEQ_LENGTH: d->seq_length = mt_tool_num(o, 1, INT_MAX); return 1;
	case MT_DOPT_SEED: d->seed = mt_tool_num(o, 0, INT64_MAX / 4); if (d->seed > 0xffffffffLL) mt_die_usage(o, "--seed must fit 32 bits"); return 1;
	case MT_DOPT_TRAIN_SAMPLES: d->train_samples = mt_tool_num(o, 0, INT64_MAX / 4); return 1;
	case MT_DOPT_TRAIN_ITERS: d->train_iters = mt_tool_num(o, 0, INT64_MAX / 4); return 1;
	case MT_DOPT_GBS: d->gbs = mt_tool_num(o, 1, INT64_MAX / 4); return 1;
	case MT_DOPT_EVAL_INTERVAL: d->eval_interval = mt_tool_num(o, 1, INT64_MAX / 4); return 1;
	case MT_DOPT_EVAL_ITERS: d->eval_iters = mt_tool_num(o, 0, INT64_MAX / 4); return 1;
	case MT_DOPT_VALID_SAMPLES: d->valid_samples = mt_tool_num(o, 0, INT64_MAX / 4); return 1;
	case MT_DOPT_TEST_SAMPLES: d->test_samples = mt_tool_num(o, 0, INT64_MAX / 4); return 1;
	case MT_DOPT_CACHE_PATH: d->cache = o->arg; return 1;
	case MT_DOPT_SURPLUS:
		if (mt_opt_double(o, &d->surplus) || d->surplus < 0)
			mt_die_usage(o, "--mid-level-dataset-surplus must be a number >= 0");
		return 1;
	case MT_DOPT_TOK_IDS: d->tok_ids = o->arg; return 1;
	case MT_DOPT_LEGACY_TOK: d->legacy_tok = 1; return 1;
	case MT_DOPT_TOK_TYPE: d->tok_type = o->arg; return 1;
	case MT_DOPT_VOCAB: d->vocab = o->arg; return 1;
	case MT_DOPT_MERGES: d->merges = o->arg; return 1;
	case MT_DOPT_TOK_MODEL: d->tok_model = o->arg; return 1;
	}
	return 0;
}

/* The tokenizer part of the cache descriptions: given exactly, or the unique_identifiers
 * of the tokenizer Megatron builds from the same flags. Current Megatron-LM builds
 * megatron.core.tokenizers (DefaultTokenizerText, the path and every keyword argument
 * as str()); with --legacy-tokenizer, or for the types the current builder describes
 * with flags mt does not have (TikTokenizer, NullTokenizer), the legacy tokenizer's
 * {"class": "_<type>", "tokenizer_path": [files]}. */
static char *tokenizer_json(const struct mt_dataopts *d)
{
	json_t *o, *paths;
	char *s, cls[128];
	int gpt2, hf, sp;

	if (d->tok_ids)
		return strdup(d->tok_ids);
	if (!d->tok_type)
		return strdup("{}");
	o = json_object();
	gpt2 = !strcmp(d->tok_type, "GPT2BPETokenizer");
	hf = !strcmp(d->tok_type, "HuggingFaceTokenizer");
	sp = !strcmp(d->tok_type, "SentencePieceTokenizer") || !strcmp(d->tok_type, "GPTSentencePieceTokenizer") ||
	     !strcmp(d->tok_type, "Llama2Tokenizer");
	if (!d->legacy_tok && (gpt2 || hf || sp)) {
#define STR(x) json_string((x) ? (x) : "None")
		json_object_set_new(o, "class", json_string("megatron.core.tokenizers.text.models.default_tokenizer.DefaultTokenizerText"));
		json_object_set_new(o, "tokenizer_path", gpt2 ? json_string(d->tok_type) : d->tok_model ? json_string(d->tok_model) : json_null());
		if (sp) {
			json_object_set_new(o, "legacy", json_string("False"));
			json_object_set_new(o, "special_tokens", json_string("None"));
		} else {
			if (gpt2)
				json_object_set_new(o, "additional_special_tokens", json_string("[]"));
			json_object_set_new(o, "vocab_file", STR(d->vocab));
			json_object_set_new(o, "merges_file", STR(d->merges));
			if (hf)
				json_object_set_new(o, "additional_special_tokens", json_string("[]"));
			json_object_set_new(o, "use_fast", json_string("True"));
			json_object_set_new(o, "trust_remote_code", json_string("False"));
			json_object_set_new(o, "include_special_tokens", json_string("True"));
		}
#undef STR
	} else {
		paths = json_array();
		snprintf(cls, sizeof(cls), "_%s", d->tok_type);
		json_object_set_new(o, "class", json_string(cls));
		if (d->vocab)
			json_array_append_new(paths, json_string(d->vocab));
		if (d->merges)
			json_array_append_new(paths, json_string(d->merges));
		if (d->tok_model)
			json_array_append_new(paths, json_string(d->tok_model));
		if (json_array_size(paths) == 0)
			json_array_append_new(paths, json_string("N/A"));
		json_object_set_new(o, "tokenizer_path", paths);
	}
	s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	return s;
}

void mt_dataopts_finish(struct mt_dataopts *d, struct mt_opt *o)
{
	struct mt_err e = { 0 };
	int any_split = 0;

	if (d->per_split_path) {
		/* {"train": "0.5 A 0.5 B" or ["0.5", "A", ...], ...} */
		json_error_t je;
		json_t *root = json_load_file(d->per_split_path, 0, &je), *v;
		if (!root)
			mt_die(MT_EXIT_DATA, "'%s':%d: %s", d->per_split_path, je.line, je.text);
		for (int s = 0; s < MT_NSPLITS; s++) {
			v = json_object_get(root, mt_split_names[s]);
			if (!v || json_is_null(v))
				continue;
			if (json_is_string(v)) {
				d->split_paths[s][d->nsplit_paths[s]++] = strdup(json_string_value(v));
			} else if (json_is_array(v)) {
				size_t i;
				json_t *it;
				json_array_foreach(v, i, it)
					if (json_is_string(it) && d->nsplit_paths[s] < 256)
						d->split_paths[s][d->nsplit_paths[s]++] = strdup(json_string_value(it));
			} else {
				mt_die(MT_EXIT_DATA, "'%s': \"%s\" must be a string or a list", d->per_split_path,
				       mt_split_names[s]);
			}
		}
		json_decref(root);
	}
	if (d->data_args_path) {
		if (mt_file_read(d->data_args_path, &d->file_text, NULL, &e))
			mt_die_err(&e);
		d->data[d->ndata++] = d->file_text;
	}
	for (int s = 0; s < MT_NSPLITS; s++)
		any_split |= d->nsplit_paths[s] > 0;
	if (d->ndata && any_split)
		mt_die_usage(o, "give --data-path or per-split paths (--train-data-path ...), not both");
	if (any_split && d->split)
		mt_die_usage(o, "--split does not go with per-split data paths (Megatron refuses it too)");
	if (!d->ndata && !any_split)
		mt_die_usage(o, "--data-path (or --train-data-path ...) is required");
	if (d->seq_length <= 0)
		mt_die_usage(o, "--seq-length is required");
	if (d->ndata) {
		if (mt_blend_parse(&d->blend, d->data, d->ndata, &e))
			mt_die_err(&e);
		d->have_blend = 1;
		d->args.blend = &d->blend;
		d->args.split = d->split;
	}
	for (int s = 0; s < MT_NSPLITS; s++)
		if (d->nsplit_paths[s]) {
			if (mt_blend_parse(&d->per_split[s], d->split_paths[s], d->nsplit_paths[s], &e))
				mt_die_err(&e);
			d->have_per_split[s] = 1;
			d->args.per_split[s] = &d->per_split[s];
		}
	/* Megatron's sample counts */
	if (d->train_samples < 0 && d->train_iters >= 0) {
		if (d->gbs < 0)
			mt_die_usage(o, "--train-iters needs --global-batch-size");
		d->train_samples = d->train_iters * d->gbs;
	}
	if (d->train_samples < 0)
		mt_die_usage(o, "--train-samples (or --train-iters with --global-batch-size) is required");
	if (d->train_iters < 0 && d->gbs > 0)
		d->train_iters = d->train_samples / d->gbs;
	if (d->valid_samples < 0 && d->gbs > 0)
		d->valid_samples = (d->train_iters / d->eval_interval + 1) * d->eval_iters * d->gbs;
	if (d->test_samples < 0 && d->gbs > 0)
		d->test_samples = d->eval_iters * d->gbs;
	d->args.samples[0] = d->train_samples > 0 ? d->train_samples : -1;
	d->args.samples[1] = d->valid_samples > 0 ? d->valid_samples : -1;
	d->args.samples[2] = d->test_samples > 0 ? d->test_samples : -1;
	d->args.seq_length = d->seq_length;
	d->args.seed = (uint32_t)d->seed;
	d->args.add_extra_token = 1;
	d->args.surplus = d->surplus;
	d->args.drop_last = 1;
	d->args.cache_dir = d->cache;
	d->tok_json = tokenizer_json(d);
	d->args.tokenizer_json = d->tok_json;
}

void mt_dataopts_free(struct mt_dataopts *d)
{
	if (d->have_blend)
		mt_blend_spec_free(&d->blend);
	for (int s = 0; s < MT_NSPLITS; s++)
		if (d->have_per_split[s])
			mt_blend_spec_free(&d->per_split[s]);
	if (d->per_split_path)
		for (int s = 0; s < MT_NSPLITS; s++)
			for (int i = 0; i < d->nsplit_paths[s]; i++)
				free((char *)d->split_paths[s][i]);
	free(d->file_text);
	free(d->tok_json);
}

static json_t *plan_json(const struct mt_dataopts *d, const struct mt_plan *p, json_t *warnings)
{
	json_t *root = json_object(), *splits = json_object();

	json_object_set_new(root, "seq_length", json_integer(d->seq_length));
	json_object_set_new(root, "seed", json_integer(d->seed));
	if (p->have_split) {
		json_t *w = json_array();
		for (int i = 0; i < 3; i++)
			json_array_append_new(w, json_real(p->split_w[i]));
		json_object_set_new(root, "split", w);
	}
	for (int s = 0; s < MT_NSPLITS; s++) {
		const struct mt_plan_split *sp = &p->split[s];
		json_t *js, *srcs;
		if (!sp->present)
			continue;
		js = json_object();
		srcs = json_array();
		json_object_set_new(js, "requested_samples", json_integer(d->args.samples[s]));
		json_object_set_new(js, "samples", json_integer(sp->size));
		json_object_set_new(js, "tokens", json_integer(sp->size * d->seq_length));
		json_object_set_new(js, "blended", json_boolean(sp->blended));
		if (sp->blended)
			json_object_set_new(js, "cache_md5", json_string(sp->md5));
		for (int i = 0; i < sp->nsrc; i++) {
			const struct mt_plan_source *src = &sp->src[i];
			const struct mt_plan_use *u = &src->use[s];
			json_t *o = json_object();
			json_object_set_new(o, "path", json_string(src->path));
			json_object_set_new(o, "weight", json_real(src->weight));
			json_object_set_new(o, "first_document", json_integer(u->range.beg));
			json_object_set_new(o, "documents", json_integer(u->documents));
			json_object_set_new(o, "tokens", json_integer(u->tokens));
			json_object_set_new(o, "target_samples", json_integer(u->target));
			json_object_set_new(o, "built_samples", json_integer(u->built));
			json_object_set_new(o, "used_samples", json_integer(u->realized));
			json_object_set_new(o, "used_tokens", json_integer(u->realized * d->seq_length));
			json_object_set_new(o, "epochs", json_integer(u->epochs));
			json_object_set_new(o, "separate_final_epoch", json_boolean(u->separate_final_epoch));
			json_object_set_new(o, "cache_md5", json_string(u->md5));
			json_array_append_new(srcs, o);
		}
		json_object_set_new(js, "sources", srcs);
		json_object_set_new(splits, mt_split_names[s], js);
	}
	json_object_set_new(root, "splits", splits);
	json_object_set_new(root, "warnings", warnings);
	return root;
}

void mt_dataopts_print_plan(const struct mt_dataopts *d, const struct mt_plan *p, int json, FILE *out)
{
	json_t *warnings = json_array();
	char w[512];

	for (int s = 0; s < MT_NSPLITS; s++) {
		const struct mt_plan_split *sp = &p->split[s];
		for (int i = 0; sp->present && i < sp->nsrc; i++) {
			const struct mt_plan_use *u = &sp->src[i].use[s];
			if (u->epochs > 1) {
				snprintf(w, sizeof(w), "%s: '%s' is oversampled: %lld epochs of its %lld tokens", mt_split_names[s],
					 sp->src[i].path, (long long)u->epochs, (long long)u->tokens);
				json_array_append_new(warnings, json_string(w));
			}
			if (u->realized == 0) {
				snprintf(w, sizeof(w), "%s: '%s' ends up unused (weight %.3g)", mt_split_names[s], sp->src[i].path,
					 sp->src[i].weight);
				json_array_append_new(warnings, json_string(w));
			}
		}
	}
	{
		size_t i;
		json_t *it;
		json_array_foreach(warnings, i, it)
			mt_warn("%s", json_string_value(it));
	}
	if (json) {
		json_t *root = plan_json(d, p, warnings);
		json_dumpf(root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
		fputc('\n', out);
		json_decref(root);
		return;
	}
	if (p->have_split)
		fprintf(out, "split %s: train %.4f, valid %.4f, test %.4f of each dataset's documents\n",
			d->split ? d->split : "969,30,1 (default)", p->split_w[0], p->split_w[1], p->split_w[2]);
	for (int s = 0; s < MT_NSPLITS; s++) {
		const struct mt_plan_split *sp = &p->split[s];
		if (!sp->present) {
			fprintf(out, "\n%s: none\n", mt_split_names[s]);
			continue;
		}
		fprintf(out, "\n%s: %lld samples of %lld tokens = %lld tokens%s (%lld asked for)\n", mt_split_names[s],
			(long long)sp->size, d->seq_length, (long long)(sp->size * d->seq_length),
			sp->blended ? ", blended" : "", (long long)d->args.samples[s]);
		fprintf(out, "  %-7s %-10s %-10s %-13s %-10s %-10s %-10s %-6s %s\n", "weight", "documents", "from",
			"tokens", "target", "built", "used", "epochs", "source");
		for (int i = 0; i < sp->nsrc; i++) {
			const struct mt_plan_use *u = &sp->src[i].use[s];
			fprintf(out, "  %-7.4f %-10lld %-10lld %-13lld %-10lld %-10lld %-10lld %-6lld %s\n", sp->src[i].weight,
				(long long)u->documents, (long long)u->range.beg, (long long)u->tokens, (long long)u->target,
				(long long)u->built, (long long)u->realized, (long long)u->epochs, sp->src[i].path);
		}
	}
	json_decref(warnings);
}
