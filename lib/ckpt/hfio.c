/* hfio.c: export to and import from Hugging Face model directories (see hfio.h). */
#include "ckpt/hfio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "ckpt/ckpt.h"
#include "base/files.h"
#include "base/knobs.h"
#include "model/gpt.h"
#include "base/log.h"
#include "ckpt/safetensors.h"
#include "text/spm.h"
#include "text/tokenizer.h"

int mt_hf_logprobs(const struct mt_config *c, const struct mt_params *p, const float *w, const int32_t *ids, int T,
		   double *out, struct mt_err *err)
{
	struct mt_gpt_acts a;
	int32_t *tg = malloc((size_t)T * sizeof(int32_t));
	const float *pr;

	if (!tg)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int i = 0; i < T; i++) {
		if (ids[i] < 0 || ids[i] >= c->vocab_size) {
			free(tg);
			return mt_err_set(err, MT_EXIT_USAGE, "token id %d outside the vocabulary of %lld", ids[i],
					  (long long)c->vocab_size);
		}
		tg[i] = -1;
	}
	if (mt_gpt_acts_alloc(&a, c, 1, T, 0, err)) {
		free(tg);
		return -1;
	}
	mt_gpt_forward_f32(c, p, w, ids, tg, &a, NULL);
	/* The CPU forward pass leaves softmax probabilities over the padded vocabulary in
	 * the buffer gpt.h calls logits: renormalized over the real vocabulary they give the
	 * log-softmax of the real logits. Should that buffer hold raw logits one day (a row
	 * that is not a distribution), the log-softmax is taken from them directly. */
	pr = mt_gpt_probs_f32(&a);
	for (int t = 0; t < T; t++) {
		const float *row = pr + (int64_t)t * c->padded_vocab_size;
		double s = 0, mx = -INFINITY;
		int probs = 1;
		for (int64_t v = 0; v < c->padded_vocab_size; v++) {
			probs &= row[v] >= 0 && row[v] <= 1;
			s += row[v];
		}
		probs &= fabs(s - 1) < 1e-3;
		if (probs) {
			s = 0;
			for (int64_t v = 0; v < c->vocab_size; v++)
				s += row[v];
			for (int64_t v = 0; v < c->vocab_size; v++)
				out[(int64_t)t * c->vocab_size + v] = log((double)row[v] / s);
			continue;
		}
		for (int64_t v = 0; v < c->vocab_size; v++)
			mx = row[v] > mx ? row[v] : mx;
		s = 0;
		for (int64_t v = 0; v < c->vocab_size; v++)
			s += exp((double)row[v] - mx);
		for (int64_t v = 0; v < c->vocab_size; v++)
			out[(int64_t)t * c->vocab_size + v] = (double)row[v] - mx - log(s);
	}
	mt_gpt_acts_free(&a);
	free(tg);
	return 0;
}

void mt_hf_loaded_free(struct mt_hf_loaded *l)
{
	free(l->w);
	mt_params_free(&l->params);
	memset(l, 0, sizeof(*l));
}

int mt_hf_load_dir(const char *dir, enum mt_hf_format f, int divisible_by, int seq_length, struct mt_hf_loaded *out,
		   struct mt_err *err)
{
	char *cpath = mt_path_join(dir, "config.json"), *text = NULL;
	struct mt_st_set s;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (!cpath)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (mt_file_read(cpath, &text, NULL, err) ||
	    mt_hf_config_parse(text, cpath, f, divisible_by, seq_length, &out->cfg, err))
		goto out;
	if (mt_params_build(&out->params, &out->cfg, err))
		goto out;
	out->w = malloc((size_t)out->params.total * sizeof(float));
	if (!out->w) {
		mt_err_set(err, MT_EXIT_IO, "out of memory for %lld weights", (long long)out->params.total);
		goto out;
	}
	if (mt_st_set_open(&s, dir, err))
		goto out;
	rc = mt_hf_import_tensors(&out->cfg, &out->params, &s, f, out->w, err);
	mt_st_set_close(&s);
out:
	if (rc)
		mt_hf_loaded_free(out);
	free(cpath);
	free(text);
	return rc;
}

/* ---- export ---- */

static int write_text(const char *dir, const char *name, const char *text, struct mt_err *err)
{
	char *p = mt_path_join(dir, name);
	int rc;

	if (!p)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	rc = mt_atomic_write_file(p, text, strlen(text), err);
	free(p);
	return rc;
}

static int copy_file(const char *src, const char *dir, const char *name, struct mt_err *err)
{
	char *text = NULL, *p = mt_path_join(dir, name);
	size_t n;
	int rc = -1;

	if (p && !mt_file_read(src, &text, &n, err))
		rc = mt_atomic_write_file(p, text, n, err);
	else if (!p)
		mt_err_set(err, MT_EXIT_IO, "out of memory");
	free(text);
	free(p);
	return rc;
}

/* The id of <|endoftext|> in a GPT-2 vocab.json, else -1. */
static int64_t gpt2_eod(const char *vocab)
{
	json_t *o = json_load_file(vocab, 0, NULL), *v = o ? json_object_get(o, "<|endoftext|>") : NULL;
	int64_t id = json_is_integer(v) ? json_integer_value(v) : -1;

	json_decref(o);
	return id;
}

static int write_json(const char *dir, const char *name, json_t *o, struct mt_err *err)
{
	char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	int rc = s ? write_text(dir, name, s, err) : mt_err_set(err, MT_EXIT_IO, "out of memory");

	free(s);
	json_decref(o);
	return rc;
}

/* A SentencePiece tokenizer: the model file copied as tokenizer.model, and a
 * tokenizer_config.json for transformers' LlamaTokenizer (legacy mode: the library's
 * own ids; a BOS first only for Llama2Tokenizer; the ids SentencePieceTokenizer adds
 * after the model's pieces as added tokens). */
static int write_tokenizer_spm(const struct mt_model *m, const char *dir, struct mt_hf_tokens *tok, int *written,
			       struct mt_err *err)
{
	struct mt_tokenizer_args a = { .type = m->tok_type, .tokenizer_model = m->tok_model };
	struct mt_tokenizer t;
	const struct mt_spm *s;
	json_t *tc, *gc, *added;
	size_t n;
	char name[64];

	if (!m->tok_model || access(m->tok_model, R_OK) != 0) {
		mt_warn("no tokenizer files in the export: the checkpoint's tokenizer model '%s' cannot be read (moved?); "
			"copy it there as tokenizer.model yourself", m->tok_model ? m->tok_model : "(none recorded)");
		return 0;
	}
	if (mt_tokenizer_load(&t, &a, err))
		return mt_err_prefix(err, "tokenizer recorded in '%s'", m->iterdir);
	s = t.vocab.spm;
	tok->bos = s->bos;
	tok->eos = t.vocab.eod;
	tc = json_object();
	json_object_set_new(tc, "tokenizer_class", json_string("LlamaTokenizer"));
	json_object_set_new(tc, "model_max_length", json_integer(m->cfg.max_position_embeddings));
	json_object_set_new(tc, "add_bos_token", json_boolean(s->type == MT_SPM_LLAMA2));
	json_object_set_new(tc, "add_eos_token", json_false());
	json_object_set_new(tc, "legacy", json_true());
	json_object_set_new(tc, "clean_up_tokenization_spaces", json_false());
	{
		/* the pieces' own text, not their streamed form */
		static const char *const keys[] = { "bos_token", "eos_token", "unk_token" };
		int32_t ids[] = { s->bos, t.vocab.eod, mt_spmodel_unk(s->model) };
		for (int i = 0; i < 3; i++) {
			const char *p;
			if (ids[i] < 0)
				continue;
			if (ids[i] < s->npieces) {
				p = mt_spmodel_piece(s->model, ids[i], &n);
				json_object_set_new(tc, keys[i], json_stringn(p, n));
			} else {
				json_object_set_new(tc, keys[i], json_stringn(t.vocab.arena + t.vocab.off[ids[i]],
									     t.vocab.len[ids[i]]));
			}
		}
	}
	added = json_object();
	for (int i = 0; i < s->nspecial; i++) {
		json_t *e;
		if (s->special[i].id < s->npieces)
			continue;
		e = json_object();
		json_object_set_new(e, "content", json_string(s->special[i].text));
		json_object_set_new(e, "special", json_true());
		snprintf(name, sizeof(name), "%d", s->special[i].id);
		json_object_set_new(added, name, e);
	}
	if (json_object_size(added))
		json_object_set_new(tc, "added_tokens_decoder", added);
	else
		json_decref(added);
	mt_tokenizer_free(&t);
	if (copy_file(m->tok_model, dir, "tokenizer.model", err))
		return mt_err_prefix(err, "tokenizer recorded in '%s'", m->iterdir);
	if (write_json(dir, "tokenizer_config.json", tc, err))
		return -1;
	gc = json_object();
	json_object_set_new(gc, "bos_token_id", tok->bos >= 0 ? json_integer(tok->bos) : json_null());
	json_object_set_new(gc, "eos_token_id", tok->eos >= 0 ? json_integer(tok->eos) : json_null());
	if (write_json(dir, "generation_config.json", gc, err))
		return -1;
	*written = 2;
	return 0;
}

/* A SentencePiece tokenizer.model beside imported weights goes with the checkpoint
 * (ckpt/tokenizer/tokenizer.model), recorded as Llama2Tokenizer when transformers adds a
 * BOS (add_bos_token, LlamaTokenizer's default), else as GPTSentencePieceTokenizer. */
static int mkdir_p(const char *dir, struct mt_err *err);

static int import_spm(const char *hfdir, const char *ckptdir, char *abs_ck, json_t *ta, struct mt_err *err)
{
	char *model = mt_path_join(hfdir, "tokenizer.model"), *cfgp = mt_path_join(hfdir, "tokenizer_config.json");
	char *tokdir = NULL, *m2 = NULL;
	json_t *tc = NULL, *tk, *bos;
	int rc = -1;

	if (!model || !cfgp) {
		rc = mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (access(model, R_OK) != 0) {
		rc = 0;
		goto out;
	}
	if (mkdir_p(ckptdir, err) || !realpath(ckptdir, abs_ck))
		goto out;
	tokdir = mt_path_join(abs_ck, "tokenizer");
	if (!tokdir || (mkdir(tokdir, 0777) != 0 && errno != EEXIST)) {
		mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", tokdir ? tokdir : ckptdir);
		goto out;
	}
	if (copy_file(model, tokdir, "tokenizer.model", err))
		goto out;
	m2 = mt_path_join(tokdir, "tokenizer.model");
	tc = json_load_file(cfgp, 0, NULL);
	bos = json_object_get(tc, "add_bos_token");
	tk = json_object();
	json_object_set_new(tk, "type", json_string(!bos || json_is_true(bos) ? "Llama2Tokenizer"
								: "GPTSentencePieceTokenizer"));
	json_object_set_new(tk, "tokenizer_model", json_string(m2 ? m2 : ""));
	json_object_set_new(ta, "tokenizer", tk);
	rc = 0;
out:
	json_decref(tc);
	free(model);
	free(cfgp);
	free(tokdir);
	free(m2);
	return rc;
}

static int write_tokenizer(const struct mt_model *m, const char *dir, struct mt_hf_tokens *tok, int *written,
			   struct mt_err *err)
{
	json_t *tc, *gc;
	char *s;
	int rc;

	*written = 0;
	tok->bos = tok->eos = -1;
	if (!m->tok_type)
		return 0;
	if (!strcmp(m->tok_type, "NullTokenizer")) {
		tok->bos = tok->eos = m->cfg.vocab_size - 1; /* its end-of-document id is the last */
		return 0;
	}
	if (mt_spm_type_parse(m->tok_type))
		return write_tokenizer_spm(m, dir, tok, written, err);
	if (strcmp(m->tok_type, "GPT2BPETokenizer") || !m->tok_vocab_file || !m->tok_merge_file)
		return 0;
	if (access(m->tok_vocab_file, R_OK) != 0 || access(m->tok_merge_file, R_OK) != 0) {
		mt_warn("no tokenizer files in the export: the checkpoint's '%s' or '%s' cannot be read (moved?); "
			"copy vocab.json and merges.txt there yourself", m->tok_vocab_file, m->tok_merge_file);
		return 0;
	}
	if (copy_file(m->tok_vocab_file, dir, "vocab.json", err) || copy_file(m->tok_merge_file, dir, "merges.txt", err))
		return mt_err_prefix(err, "tokenizer recorded in '%s'", m->iterdir);
	tok->bos = tok->eos = gpt2_eod(m->tok_vocab_file);
	tc = json_object();
	json_object_set_new(tc, "tokenizer_class", json_string("GPT2Tokenizer"));
	json_object_set_new(tc, "model_max_length", json_integer(m->cfg.max_position_embeddings));
	json_object_set_new(tc, "add_prefix_space", json_false());
	json_object_set_new(tc, "clean_up_tokenization_spaces", json_false());
	if (tok->eos >= 0) {
		json_object_set_new(tc, "bos_token", json_string("<|endoftext|>"));
		json_object_set_new(tc, "eos_token", json_string("<|endoftext|>"));
		json_object_set_new(tc, "unk_token", json_string("<|endoftext|>"));
	}
	s = json_dumps(tc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(tc);
	rc = write_text(dir, "tokenizer_config.json", s, err);
	free(s);
	if (rc)
		return -1;
	gc = json_object();
	json_object_set_new(gc, "bos_token_id", tok->bos >= 0 ? json_integer(tok->bos) : json_null());
	json_object_set_new(gc, "eos_token_id", tok->eos >= 0 ? json_integer(tok->eos) : json_null());
	s = json_dumps(gc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(gc);
	rc = write_text(dir, "generation_config.json", s, err);
	free(s);
	*written = rc == 0;
	return rc;
}

/* The fixed prompt of the check: spread over the vocabulary, within the positions. */
static int prompt(const struct mt_config *c, int32_t *ids, int max)
{
	int T = c->seq_length < max ? c->seq_length : max;

	if (c->position_embedding_type == MT_POS_LEARNED && c->max_position_embeddings < T)
		T = c->max_position_embeddings;
	for (int i = 0; i < T; i++)
		ids[i] = (int32_t)(((int64_t)i * 7919 + 11) % c->vocab_size);
	return T;
}

static int verify(const struct mt_model *m, const char *dir, const struct mt_hf_export_opts *o, struct mt_hf_report *r,
		  struct mt_err *err)
{
	struct mt_hf_loaded l;
	int32_t ids[16];
	int T = prompt(&m->cfg, ids, 16);
	double *a = NULL, *b = NULL, worst = 0;
	int64_t n = (int64_t)T * m->cfg.vocab_size, at = -1;
	int rc = -1;

	if (mt_hf_load_dir(dir, o->format, m->cfg.make_vocab_size_divisible_by, m->cfg.seq_length, &l, err))
		return mt_err_prefix(err, "checking the export: reading it back");
	if (l.cfg.vocab_size != m->cfg.vocab_size || l.cfg.padded_vocab_size != m->cfg.padded_vocab_size ||
	    l.params.total != m->params.total) {
		mt_err_set(err, MT_EXIT_FALSE, "checking the export: its config reads back as another model "
			   "(vocabulary %lld, padded %lld, %lld weights; want %lld, %lld, %lld)", (long long)l.cfg.vocab_size,
			   (long long)l.cfg.padded_vocab_size, (long long)l.params.total, (long long)m->cfg.vocab_size,
			   (long long)m->cfg.padded_vocab_size, (long long)m->params.total);
		goto out;
	}
	a = malloc((size_t)n * sizeof(double));
	b = malloc((size_t)n * sizeof(double));
	if (!a || !b) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (mt_hf_logprobs(&m->cfg, &m->params, m->w, ids, T, a, err) || mt_hf_logprobs(&l.cfg, &l.params, l.w, ids, T, b, err))
		goto out;
	for (int64_t i = 0; i < n; i++) {
		/* below e^-80 both are "never"; fp32 probabilities underflow there */
		double x = a[i] > -80 ? a[i] : -80, y = b[i] > -80 ? b[i] : -80, dd = fabs(x - y);
		if (!(dd <= worst)) {
			worst = dd;
			at = i;
			if (isnan(dd))
				break;
		}
	}
	r->verified = 1;
	r->tokens = T;
	r->max_diff = worst;
	if (!(worst <= o->tolerance)) {
		mt_err_set(err, MT_EXIT_FALSE,
			   "the export does not reproduce the model: log-probability of token %lld at position %lld is %.9g "
			   "from the exported files, %.9g from the checkpoint (difference %.3g, tolerance %.3g)",
			   (long long)(at % m->cfg.vocab_size), (long long)(at / m->cfg.vocab_size), b[at], a[at], worst,
			   o->tolerance);
		goto out;
	}
	rc = 0;
out:
	free(a);
	free(b);
	mt_hf_loaded_free(&l);
	return rc;
}

static int dir_is_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int empty = 1;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			empty = 0;
	closedir(d);
	return empty;
}

/* After a successful export to DIR/BASE: remove BASE.tmp.<pid> directories that killed
 * exports left beside it, when that process no longer runs on this machine (an export
 * still running keeps its own). */
static void remove_leftovers(const char *dir, const char *base)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = strlen(base);

	if (!d)
		return;
	while ((e = readdir(d))) {
		const char *s = e->d_name + n;
		char *end, *p;
		long pid;
		if (strncmp(e->d_name, base, n) || strncmp(s, ".tmp.", 5) || !s[5])
			continue;
		pid = strtol(s + 5, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid() || !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
			continue;
		if ((p = mt_path_join(dir, e->d_name))) {
			mt_rm_tree(p);
			free(p);
		}
	}
	closedir(d);
}

int mt_hf_export(const struct mt_model *m, const char *outdir, const struct mt_hf_export_opts *o,
		 struct mt_hf_report *r, struct mt_err *err)
{
	struct mt_hf_tensors ht;
	struct mt_hf_tokens tok;
	struct stat sb;
	char tmp[PATH_MAX], *cfg = NULL, *mpath = NULL;
	static const char *const meta[] = { "format", "pt", "producer", "mt-ckpt-reshard export" };
	int rc = -1;

	char dir[PATH_MAX];
	size_t dl;

	memset(r, 0, sizeof(*r));
	if (mt_hf_check(&m->cfg, o->format, err))
		return -1;
	/* "out/" names the directory "out": the temporary one goes beside it, not inside */
	if ((dl = (size_t)snprintf(dir, sizeof(dir), "%s", outdir)) >= sizeof(dir))
		return mt_err_set(err, MT_EXIT_USAGE, "output path too long: '%s'", outdir);
	while (dl > 1 && dir[dl - 1] == '/')
		dir[--dl] = 0;
	outdir = dir;
	if (stat(outdir, &sb) == 0 && !(S_ISDIR(sb.st_mode) && dir_is_empty(outdir)))
		return mt_err_set(err, MT_EXIT_USAGE, "'%s' exists: remove it or choose another output directory", outdir);
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", outdir, (long)getpid()) >= sizeof(tmp))
		return mt_err_set(err, MT_EXIT_USAGE, "output path too long: '%s'", outdir);
	if (mkdir(tmp, 0777) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", tmp);
	if (mt_hf_export_tensors(&m->cfg, &m->params, m->w, o->format, &ht, err))
		goto out;
	r->tensors = ht.n;
	/* test hook: a wrong weight, to show that the check below catches one */
	if (mt_knob_set(MT_KNOB_TEST_HF_EXPORT_CORRUPT) && ht.n > 0 && ht.t[ht.n / 2].shape[0] > 0)
		((float *)ht.data[ht.n / 2])[0] += 0.5f;
	mpath = mt_path_join(tmp, "model.safetensors");
	if (!mpath) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out_t;
	}
	if (mt_st_write(mpath, ht.t, ht.n, meta, 2, err))
		goto out_t;
	mt_hf_tensors_free(&ht); /* the check reads the file, not this copy */
	if (write_tokenizer(m, tmp, &tok, &r->tokenizer_files, err))
		goto out_t;
	cfg = mt_hf_config_json(&m->cfg, o->format, &tok);
	if (!cfg) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out_t;
	}
	{
		size_t n = strlen(cfg);
		char *c2 = realloc(cfg, n + 2);
		if (c2) {
			cfg = c2;
			strcpy(cfg + n, "\n");
		}
	}
	if (write_text(tmp, "config.json", cfg, err))
		goto out_t;
	if (o->verify && verify(m, tmp, o, r, err))
		goto out_t;
	mt_fsync_path(tmp, 1);
	if (rename(tmp, outdir) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", tmp, outdir);
		goto out_t;
	}
	{
		char parent[PATH_MAX], *slash;
		snprintf(parent, sizeof(parent), "%s", outdir);
		slash = strrchr(parent, '/');
		if (slash)
			*slash = 0; /* "/out": parent "" is taken as "/" below */
		else
			strcpy(parent, ".");
		if (!parent[0])
			strcpy(parent, "/");
		mt_fsync_path(parent, 1);
		remove_leftovers(parent, slash ? strrchr(outdir, '/') + 1 : outdir);
	}
	rc = 0;
out_t:
	mt_hf_tensors_free(&ht);
out:
	if (rc)
		mt_rm_tree(tmp);
	free(cfg);
	free(mpath);
	return rc;
}

/* ---- import ---- */

static int mkdir_p(const char *dir, struct mt_err *err)
{
	char p[PATH_MAX];

	if ((size_t)snprintf(p, sizeof(p), "%s", dir) >= sizeof(p))
		return mt_err_set(err, MT_EXIT_USAGE, "path too long: '%s'", dir);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			if (mkdir(p, 0777) != 0 && errno != EEXIST)
				return mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", p);
			*s = '/';
		}
	if (mkdir(p, 0777) != 0 && errno != EEXIST)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", p);
	return 0;
}

int mt_hf_import(const char *hfdir, const char *ckptdir, const struct mt_hf_import_opts *o, struct mt_hf_loaded *out,
		 struct mt_err *err)
{
	struct mt_hf_loaded l;
	char abs_hf[PATH_MAX], abs_ck[PATH_MAX], *cfg = NULL, *args = NULL, *vocab = mt_path_join(hfdir, "vocab.json"),
		*merges = mt_path_join(hfdir, "merges.txt"), *tokdir = NULL;
	json_t *ta = json_object(), *src = json_object();
	int rc = -1;

	if (!vocab || !merges)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	{
		/* never move the latest marker of a training run back to an import */
		int64_t it = -1;
		if (mt_ckpt_latest(ckptdir, &it, err) || it >= 0) {
			if (it >= 0)
				mt_err_set(err, MT_EXIT_USAGE, "'%s' already holds checkpoints (latest: iteration %lld): "
					   "import into a new directory", ckptdir, (long long)it);
			free(vocab);
			free(merges);
			json_decref(ta);
			json_decref(src);
			return -1;
		}
	}
	if (mt_hf_load_dir(hfdir, o->format, o->divisible_by, o->seq_length, &l, err)) {
		free(vocab);
		free(merges);
		json_decref(ta);
		json_decref(src);
		return -1;
	}
	if (!realpath(hfdir, abs_hf))
		snprintf(abs_hf, sizeof(abs_hf), "%s", hfdir);
	json_object_set_new(src, "path", json_string(abs_hf));
	json_object_set_new(src, "format", json_string(mt_hf_format_name(o->format)));
	json_object_set_new(src, "vocab_size", json_integer(l.cfg.vocab_size));
	json_object_set_new(src, "padded_vocab_size", json_integer(l.cfg.padded_vocab_size));
	json_object_set_new(ta, "argv", json_array());
	json_object_set_new(ta, "imported_from", src);
	/* a GPT-2 tokenizer beside the weights goes with the checkpoint, so that the tools
	 * that read the recorded tokenizer find it */
	if (access(vocab, R_OK) == 0 && access(merges, R_OK) == 0) {
		json_t *tk = json_object();
		char *v2, *m2;
		if (mkdir_p(ckptdir, err) || !realpath(ckptdir, abs_ck))
			goto out;
		tokdir = mt_path_join(abs_ck, "tokenizer");
		if (!tokdir || (mkdir(tokdir, 0777) != 0 && errno != EEXIST)) {
			mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", tokdir ? tokdir : ckptdir);
			json_decref(tk);
			goto out;
		}
		if (copy_file(vocab, tokdir, "vocab.json", err) || copy_file(merges, tokdir, "merges.txt", err)) {
			json_decref(tk);
			goto out;
		}
		v2 = mt_path_join(tokdir, "vocab.json");
		m2 = mt_path_join(tokdir, "merges.txt");
		json_object_set_new(tk, "type", json_string("GPT2BPETokenizer"));
		json_object_set_new(tk, "vocab_file", json_string(v2 ? v2 : ""));
		json_object_set_new(tk, "merge_file", json_string(m2 ? m2 : ""));
		free(v2);
		free(m2);
		json_object_set_new(ta, "tokenizer", tk);
	} else if (import_spm(hfdir, ckptdir, abs_ck, ta, err)) {
		goto out;
	}
	args = json_dumps(ta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	cfg = mt_config_to_json(&l.cfg);
	if (!args || !cfg) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	{
		struct mt_ckpt_state st = { .iteration = o->iteration, .config_json = cfg, .train_args_json = args };
		if (mt_ckpt_save(ckptdir, &l.params, l.w, NULL, NULL, &st, 0, err))
			goto out;
	}
	rc = 0;
out:
	if (rc == 0 && out)
		*out = l;
	else
		mt_hf_loaded_free(&l);
	json_decref(ta);
	free(cfg);
	free(args);
	free(vocab);
	free(merges);
	free(tokdir);
	return rc;
}
