/* Unit tests for lib/ckpt/hf.c: for GPT-2 and Llama configs (grouped-query attention with one and
 * several groups, biases, tied and untied, padded vocabularies), the export covers every
 * element of every Hugging Face tensor exactly once and the import through real files
 * gives the weights back bit for bit (padding rows: copies of the last real row); the
 * config survives config.json both ways; each option a format cannot express is refused
 * by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/hf.h"
#include "tap.h"

static void base(struct mt_config *c, int llama)
{
	memset(c, 0, sizeof(*c));
	c->num_layers = 2;
	c->hidden_size = 32;
	c->num_attention_heads = 4;
	c->seq_length = 16;
	c->vocab_size = 37;
	c->make_vocab_size_divisible_by = 8;
	c->add_bias_linear = 1;
	if (llama) {
		c->position_embedding_type = MT_POS_ROPE;
		c->normalization = MT_NORM_RMSNORM;
		c->swiglu = 1;
		c->ffn_hidden_size = 48;
		c->rotary_base = 500000;
		c->norm_epsilon = 1e-6;
	}
	mt_config_defaults(c);
}

static void roundtrip(const char *what, struct mt_config *c, enum mt_hf_format f, const char *dir)
{
	struct mt_params p;
	struct mt_hf_tensors h;
	struct mt_st_set s;
	struct mt_err e = { 0 };
	float *w, *back;
	int64_t nhf = 0, nset = 0;
	char path[512];
	int covered = 1, same = 1, pads = 1;

	if (!ok(mt_config_validate(c, &e) == 0 && mt_params_build(&p, c, &e) == 0, "%s: config builds: %s", what, e.msg))
		return;
	w = malloc((size_t)p.total * sizeof(float));
	back = malloc((size_t)p.total * sizeof(float));
	for (int64_t i = 0; i < p.total; i++)
		w[i] = (float)(i + 1); /* every weight distinct */
	ok(mt_hf_export_tensors(c, &p, w, f, &h, &e) == 0, "%s: export: %s", what, e.msg);
	/* exactly once: the values exported are distinct, so count them against the real ones */
	{
		char *seen = calloc((size_t)p.total + 1, 1);
		for (int i = 0; i < h.n; i++) {
			int64_t n = h.t[i].shape[0] * (h.t[i].ndim == 2 ? h.t[i].shape[1] : 1);
			const float *d = h.data[i];
			nhf += n;
			for (int64_t k = 0; k < n; k++) {
				int64_t v = (int64_t)d[k];
				if (v < 1 || v > p.total || seen[v])
					covered = 0;
				else
					seen[v] = 1;
			}
		}
		for (int i = 0; i < p.n; i++)
			if (p.p[i].kind == MT_P_WORD_EMB || p.p[i].kind == MT_P_OUTPUT)
				nset += c->vocab_size * p.p[i].shape[1];
			else
				nset += p.p[i].numel;
		free(seen);
	}
	ok(covered && nhf == nset, "%s: every exported element is a distinct weight, %lld of %lld (padding dropped)", what,
	   (long long)nhf, (long long)nset);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	ok(mt_st_write(path, h.t, h.n, NULL, 0, &e) == 0, "%s: written", what);
	ok(mt_st_set_open(&s, dir, &e) == 0, "%s: reopened: %s", what, e.msg);
	memset(back, 0, (size_t)p.total * sizeof(float));
	ok(mt_hf_import_tensors(c, &p, &s, f, back, &e) == 0, "%s: import: %s", what, e.msg);
	for (int i = 0; i < p.n; i++) {
		const struct mt_param *q = &p.p[i];
		int emb = q->kind == MT_P_WORD_EMB || q->kind == MT_P_OUTPUT;
		for (int64_t r = 0; r < q->shape[0]; r++)
			for (int64_t col = 0; col < q->shape[1]; col++) {
				int64_t at = q->offset + r * q->shape[1] + col;
				if (emb && r >= c->vocab_size) {
					if (back[at] != w[q->offset + (c->vocab_size - 1) * q->shape[1] + col])
						pads = 0;
				} else if (back[at] != w[at])
					same = 0;
			}
	}
	ok(same, "%s: import gives back every weight", what);
	ok(pads, "%s: padding rows are copies of the last real row", what);
	mt_st_set_close(&s);
	unlink(path);
	mt_hf_tensors_free(&h);
	mt_params_free(&p);
	free(w);
	free(back);
}

static void config_roundtrip(const char *what, const struct mt_config *c, enum mt_hf_format f)
{
	struct mt_hf_tokens tok = { 5, 6 };
	struct mt_config d;
	struct mt_err e = { 0 };
	char *j = mt_hf_config_json(c, f, &tok);

	ok(j && mt_hf_config_parse(j, "config.json", f, c->make_vocab_size_divisible_by, c->seq_length, &d, &e) == 0,
	   "%s: config.json parses back: %s", what, e.msg);
	ok(d.num_layers == c->num_layers && d.hidden_size == c->hidden_size &&
	   d.num_attention_heads == c->num_attention_heads && d.num_query_groups == c->num_query_groups &&
	   d.kv_channels == c->kv_channels && d.ffn_hidden_size == c->ffn_hidden_size && d.vocab_size == c->vocab_size &&
	   d.padded_vocab_size == c->padded_vocab_size && d.max_position_embeddings == c->max_position_embeddings &&
	   d.position_embedding_type == c->position_embedding_type && d.normalization == c->normalization &&
	   d.swiglu == c->swiglu && d.add_bias_linear == c->add_bias_linear &&
	   d.untie_embeddings_and_output_weights == c->untie_embeddings_and_output_weights &&
	   d.norm_epsilon == c->norm_epsilon && d.rotary_base == c->rotary_base, "%s: the same model", what);
	like(j, f == MT_HF_GPT2 ? "\"vocab_size\": 37" : "\"num_key_value_heads\"", "%s: real vocabulary size", what);
	free(j);
}

int main(void)
{
	char dir[256];
	struct mt_config c;
	struct mt_err e = { 0 };

	snprintf(dir, sizeof(dir), "/tmp/mt-test-hf.%d", (int)getpid());
	mkdir(dir, 0777);

	base(&c, 0);
	roundtrip("gpt2", &c, MT_HF_GPT2, dir);
	config_roundtrip("gpt2", &c, MT_HF_GPT2);
	base(&c, 1);
	c.num_query_groups = 2;
	mt_config_defaults(&c);
	roundtrip("llama gqa 2 groups, biases, tied", &c, MT_HF_LLAMA, dir);
	config_roundtrip("llama gqa", &c, MT_HF_LLAMA);
	base(&c, 1);
	c.num_query_groups = 1;
	c.add_bias_linear = 0;
	c.untie_embeddings_and_output_weights = 1;
	c.kv_channels = 12; /* head size not hidden / heads */
	mt_config_defaults(&c);
	roundtrip("llama one group, untied, head size 12", &c, MT_HF_LLAMA, dir);
	config_roundtrip("llama untied", &c, MT_HF_LLAMA);

	/* refusals name the option */
	{
		static const struct { const char *opt; int field; } cases[] = {
			{ "--normalization RMSNorm", 0 }, { "--position-embedding-type rope", 1 }, { "--swiglu", 2 },
			{ "--disable-bias-linear", 3 }, { "--untie-embeddings-and-output-weights", 4 },
			{ "--group-query-attention", 5 },
		};
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			base(&c, 0);
			switch (cases[i].field) {
			case 0: c.normalization = MT_NORM_RMSNORM; break;
			case 1: c.position_embedding_type = MT_POS_ROPE; break;
			case 2: c.swiglu = 1; break;
			case 3: c.add_bias_linear = 0; break;
			case 4: c.untie_embeddings_and_output_weights = 1; break;
			case 5: c.num_query_groups = 2; break;
			}
			ok(mt_hf_check(&c, MT_HF_GPT2, &e) == -1 && e.code == MT_EXIT_USAGE && strstr(e.msg, cases[i].opt),
			   "hf-gpt2 refuses %s: %s", cases[i].opt, e.msg);
		}
		base(&c, 0);
		ok(mt_hf_check(&c, MT_HF_LLAMA, &e) == -1 && strstr(e.msg, "--normalization LayerNorm"),
		   "hf-llama refuses LayerNorm: %s", e.msg);
		base(&c, 1);
		c.swiglu = 0;
		ok(mt_hf_check(&c, MT_HF_LLAMA, &e) == -1 && strstr(e.msg, "--swiglu"), "hf-llama refuses GELU: %s", e.msg);
	}
	rmdir(dir);
	return tap_done();
}
