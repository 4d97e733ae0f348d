/* model.c: open a trained model from a checkpoint (model.h). */
#include "ckpt/model.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static char *dup_member(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

/* The tokenizer mt-train recorded: {"tokenizer": {...}} in the training arguments. */
static void read_tokenizer(struct mt_model *m)
{
	json_t *root, *tk;

	if (!m->state.train_args_json)
		return;
	root = json_loads(m->state.train_args_json, 0, NULL);
	tk = root ? json_object_get(root, "tokenizer") : NULL;
	if (json_is_object(tk)) {
		m->tok_type = dup_member(tk, "type");
		m->tok_vocab_file = dup_member(tk, "vocab_file");
		m->tok_merge_file = dup_member(tk, "merge_file");
		m->tok_model = dup_member(tk, "tokenizer_model");
	}
	json_decref(root);
}

static int open_one(struct mt_model *m, const char *path, struct mt_err *err)
{
	double stored = 0;

	memset(m, 0, sizeof(*m));
	if (mt_ckpt_resolve(path, m->iterdir, sizeof(m->iterdir), &m->iteration, err))
		return -1;
	if (mt_ckpt_read_state(m->iterdir, &m->state, err))
		return -1;
	if (mt_config_from_json(&m->cfg, m->state.config_json, err)) {
		mt_ckpt_loaded_free(&m->state);
		if (err)
			err->code = MT_EXIT_DATA; /* a stored config that does not validate is bad data */
		return mt_err_prefix(err, "checkpoint '%s': attribute 'config'", m->iterdir);
	}
	/* the config against the file, before it sizes anything */
	if (mt_ckpt_check_config(m->iterdir, &m->cfg, &stored, err)) {
		mt_ckpt_loaded_free(&m->state);
		return -1;
	}
	if (mt_params_build(&m->params, &m->cfg, err)) {
		mt_ckpt_loaded_free(&m->state);
		return mt_err_prefix(err, "checkpoint '%s'", m->iterdir);
	}
	if ((double)m->params.total > stored) {
		mt_err_set(err, MT_EXIT_DATA, "checkpoint '%s': its config makes a model of %lld parameters, the file stores %.0f",
			   m->iterdir, (long long)m->params.total, stored);
		mt_params_free(&m->params);
		mt_ckpt_loaded_free(&m->state);
		return -1;
	}
	m->w = malloc((size_t)m->params.total * sizeof(float));
	if (!m->w) {
		mt_params_free(&m->params);
		mt_ckpt_loaded_free(&m->state);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for the %lld weights of '%s'",
				  (long long)m->params.total, m->iterdir);
	}
	if (mt_ckpt_load(m->iterdir, &m->params, m->w, NULL, NULL, 0, err)) {
		free(m->w);
		mt_params_free(&m->params);
		mt_ckpt_loaded_free(&m->state);
		return -1;
	}
	read_tokenizer(m);
	return 0;
}

int mt_model_open(struct mt_model *m, const char *path, struct mt_err *err)
{
	int64_t *its;
	size_t n;
	char note[600], dir[4096];
	struct mt_err first = { 0 }, e = { 0 };

	memset(m, 0, sizeof(*m));
	if (mt_ckpt_candidates(path, &its, &n, note, sizeof(note), err))
		return -1;
	if (n == 0)
		return open_one(m, path, err);
	if (note[0])
		mt_ckpt_warn("%s: falling back to the newest iteration of '%s' that reads", note, path);
	for (size_t i = 0; i < n; i++) {
		if (mt_ckpt_iter_dir(dir, sizeof(dir), path, its[i], &e))
			break;
		mt_err_clear(&e);
		if (!open_one(m, dir, &e)) {
			if (i > 0)
				mt_ckpt_warn("loaded '%s' instead (the newest checkpoint of '%s' that reads)", dir, path);
			free(its);
			return 0;
		}
		mt_ckpt_warn("skipping checkpoint '%s': %s", dir, e.msg);
		if (!first.code)
			first = e;
	}
	free(its);
	if (err) {
		*err = first;
		mt_err_prefix(err, "no checkpoint of '%s' reads; the newest", path);
	}
	return -1;
}

void mt_model_close(struct mt_model *m)
{
	free(m->w);
	mt_params_free(&m->params);
	mt_ckpt_loaded_free(&m->state);
	free(m->tok_type);
	free(m->tok_vocab_file);
	free(m->tok_merge_file);
	free(m->tok_model);
	memset(m, 0, sizeof(*m));
}

int mt_model_tokenizer_args(const struct mt_model *m, struct mt_tokenizer_args *a, struct mt_err *err)
{
	if (!a->type)
		a->type = m->tok_type;
	if (!a->type)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "checkpoint '%s' records no tokenizer: give --tokenizer-type and its files",
				  m->iterdir);
	/* the recorded files belong to the recorded type only */
	if (m->tok_type && strcmp(a->type, m->tok_type) == 0) {
		if (!a->vocab_file)
			a->vocab_file = m->tok_vocab_file;
		if (!a->merge_file)
			a->merge_file = m->tok_merge_file;
		if (!a->tokenizer_model)
			a->tokenizer_model = m->tok_model;
	}
	if (strcmp(a->type, "NullTokenizer") == 0 && a->vocab_size <= 0)
		a->vocab_size = m->cfg.vocab_size - 1; /* ids below N, then the end-of-document id N */
	return 0;
}
