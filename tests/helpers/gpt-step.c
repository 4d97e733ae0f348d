/* gpt-step: one batch through a backend (the CPU's, or with --device cuda the GPU's,
 * --bf16 there), for comparison with an independent implementation
 * (tests/reference/torch_gpt.py).
 *
 *   gpt-step [model flags] --tokens FILE --output DIR [--seed N] [--steps N] [--lr LR]
 *            [--weight-decay WD] [--device cpu|cuda] [--bf16]
 *
 * The model flags are mt-train's names for the architecture (a small subset). FILE is
 * an int32 .npy of shape (2, B*T), T = --seq-length: row 0 the tokens of B sequences,
 * row 1 their targets (-1: not counted). The weights are initialized with
 * mt_params_init(seed). Written into DIR:
 *
 *   ckpt/iter_0000000/model.h5   the initial weights (weights only; the config attribute)
 *   grads/<logical name>.npy     d(mean loss)/dw of the first forward/backward, float32,
 *                                in the parameter's shape
 *   losses.txt                   the loss of each of the --steps AdamW steps on the same
 *                                batch (line 1: the loss of the initial weights), %.17g
 *   ckpt/iter_<steps>/model.h5   the weights after those steps
 *
 * AdamW: Megatron's defaults (betas 0.9/0.999, eps 1e-8), the given lr (1e-3) and weight
 * decay (0.1) on the parameters the table marks, no clipping, no schedule.
 * --label-smoothing A: Megatron's smoothed cross-entropy (torch_gpt.py --label-smoothing A). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../bin/tool.h"
#include "backend/backend.h"
#include "ckpt/ckpt.h"
#include "model/config.h"
#include "model/gpt.h"
#include "data/npy.h"
#include "model/optim.h"
#include "model/params.h"

enum {
	O_LAYERS = 256, O_HIDDEN, O_HEADS, O_GROUPS, O_FFN, O_SEQ, O_MAXPOS, O_VOCAB, O_DIVISIBLE, O_POSEMB,
	O_NORM, O_NORM_EPS, O_SWIGLU, O_NOBIAS, O_UNTIE, O_INIT_STD, O_SEED, O_TOKENS, O_OUTPUT, O_STEPS, O_LR, O_WD, O_DEVICE, O_BF16, O_SMOOTH,
};

static const struct mt_option opts[] = {
	{ "num-layers", 0, MT_ARG_REQUIRED, O_LAYERS, "N", "transformer layers" },
	{ "hidden-size", 0, MT_ARG_REQUIRED, O_HIDDEN, "H", "hidden size" },
	{ "num-attention-heads", 0, MT_ARG_REQUIRED, O_HEADS, "A", "attention heads" },
	{ "num-query-groups", 0, MT_ARG_REQUIRED, O_GROUPS, "G", "key/value heads (grouped-query attention)" },
	{ "ffn-hidden-size", 0, MT_ARG_REQUIRED, O_FFN, "F", "MLP hidden size" },
	{ "seq-length", 0, MT_ARG_REQUIRED, O_SEQ, "T", "tokens per sequence" },
	{ "max-position-embeddings", 0, MT_ARG_REQUIRED, O_MAXPOS, "N", "learned positions" },
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB, "N", "vocabulary size" },
	{ "make-vocab-size-divisible-by", 0, MT_ARG_REQUIRED, O_DIVISIBLE, "N", "vocabulary padding" },
	{ "position-embedding-type", 0, MT_ARG_REQUIRED, O_POSEMB, "TYPE", "learned_absolute or rope" },
	{ "normalization", 0, MT_ARG_REQUIRED, O_NORM, "NAME", "LayerNorm or RMSNorm" },
	{ "norm-epsilon", 0, MT_ARG_REQUIRED, O_NORM_EPS, "EPS", "norm epsilon" },
	{ "swiglu", 0, MT_ARG_NONE, O_SWIGLU, NULL, "SwiGLU MLP" },
	{ "disable-bias-linear", 0, MT_ARG_NONE, O_NOBIAS, NULL, "no biases in linear layers" },
	{ "untie-embeddings-and-output-weights", 0, MT_ARG_NONE, O_UNTIE, NULL, "separate output layer" },
	{ "init-method-std", 0, MT_ARG_REQUIRED, O_INIT_STD, "STD", "initialization std" },
	{ "seed", 0, MT_ARG_REQUIRED, O_SEED, "N", "initialization seed (1234)" },
	{ "tokens", 0, MT_ARG_REQUIRED, O_TOKENS, "FILE", "int32 .npy (2, B*T): tokens, targets" },
	{ "output", 'o', MT_ARG_REQUIRED, O_OUTPUT, "DIR", "where to write" },
	{ "steps", 0, MT_ARG_REQUIRED, O_STEPS, "N", "AdamW steps on the batch (10)" },
	{ "lr", 0, MT_ARG_REQUIRED, O_LR, "LR", "learning rate (1e-3)" },
	{ "weight-decay", 0, MT_ARG_REQUIRED, O_WD, "WD", "weight decay (0.1)" },
	{ "device", 0, MT_ARG_REQUIRED, O_DEVICE, "DEV", "cpu (default) or cuda" },
	{ "bf16", 0, MT_ARG_NONE, O_BF16, NULL, "cuda: bf16 weights and activations" },
	{ "label-smoothing", 0, MT_ARG_REQUIRED, O_SMOOTH, "A", "cross-entropy label smoothing (0)" },
};

static const char *const synopsis[] = { "[model flags] --tokens FILE --output DIR [--seed N] [--steps N] [--lr LR] [--weight-decay WD]", NULL };
static const struct mt_tool_info info = { "gpt-step", "one batch through the CPU backend, for reference checks",
					  synopsis, NULL, NULL };

static long long num(struct mt_opt *o, long long min)
{
	long long v;
	if (mt_opt_long(o, min, INT32_MAX, &v))
		mt_die_usage(o, "%s", o->err.msg);
	return v;
}

static double real(struct mt_opt *o)
{
	double v;
	if (mt_opt_double(o, &v))
		mt_die_usage(o, "%s", o->err.msg);
	return v;
}

static void mkdir_or_die(const char *path)
{
	if (mkdir(path, 0777) && errno != EEXIST)
		mt_die(MT_EXIT_IO, "cannot create '%s': %s", path, strerror(errno));
}

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_config c;
	struct mt_params t;
	struct mt_backend be;
	struct mt_adamw opt;
	struct mt_ckpt_state st;
	struct mt_npy tk;
	struct mt_err e = { 0 };
	const char *tokens = NULL, *out = NULL;
	long long seed = 1234, steps = 10, B, T;
	double lr = 1e-3, wd = 0.1, loss, loss0 = 0;
	char path[4096], *cfg;
	float *w, *g, *m, *v;
	int32_t *tok, *tgt;
	FILE *f;
	int id, nonfinite;
	double norm;

	mt_tool_start(&info);
	memset(&be, 0, sizeof(be));
	be.ops = &mt_backend_cpu;
	be.opt.quiet = 1;
	memset(&c, 0, sizeof(c));
	c.add_bias_linear = 1;
	if (mt_opt_init(&o, &info, opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		switch (id) {
		case MT_OPT_ARG: mt_die_usage(&o, "unexpected argument '%s'", o.arg);
		case O_LAYERS: c.num_layers = (int)num(&o, 1); break;
		case O_HIDDEN: c.hidden_size = (int)num(&o, 1); break;
		case O_HEADS: c.num_attention_heads = (int)num(&o, 1); break;
		case O_GROUPS: c.num_query_groups = (int)num(&o, 1); break;
		case O_FFN: c.ffn_hidden_size = (int)num(&o, 1); break;
		case O_SEQ: c.seq_length = (int)num(&o, 1); break;
		case O_MAXPOS: c.max_position_embeddings = (int)num(&o, 1); break;
		case O_VOCAB: c.vocab_size = num(&o, 1); break;
		case O_DIVISIBLE: c.make_vocab_size_divisible_by = (int)num(&o, 1); break;
		case O_POSEMB:
			if (!strcmp(o.arg, "rope"))
				c.position_embedding_type = MT_POS_ROPE;
			else if (!strcmp(o.arg, "learned_absolute"))
				c.position_embedding_type = MT_POS_LEARNED;
			else
				mt_die_usage(&o, "--position-embedding-type: learned_absolute or rope");
			break;
		case O_NORM:
			if (!strcmp(o.arg, "RMSNorm"))
				c.normalization = MT_NORM_RMSNORM;
			else if (!strcmp(o.arg, "LayerNorm"))
				c.normalization = MT_NORM_LAYERNORM;
			else
				mt_die_usage(&o, "--normalization: LayerNorm or RMSNorm");
			break;
		case O_NORM_EPS: c.norm_epsilon = real(&o); break;
		case O_SWIGLU: c.swiglu = 1; break;
		case O_NOBIAS: c.add_bias_linear = 0; break;
		case O_UNTIE: c.untie_embeddings_and_output_weights = 1; break;
		case O_INIT_STD: c.init_method_std = real(&o); break;
		case O_SEED: seed = num(&o, 0); break;
		case O_TOKENS: tokens = o.arg; break;
		case O_OUTPUT: out = o.arg; break;
		case O_STEPS: steps = num(&o, 1); break;
		case O_LR: lr = real(&o); break;
		case O_WD: wd = real(&o); break;
		case O_DEVICE: be.ops = !strcmp(o.arg, "cuda") ? &mt_backend_cuda : &mt_backend_cpu; break;
		case O_BF16: be.opt.precision = MT_PREC_BF16; break;
		case O_SMOOTH: be.opt.label_smoothing = real(&o); break;
		}
	}
	if (!tokens || !out)
		mt_die_usage(&o, "--tokens and --output are required");
	mt_config_defaults(&c);
	if (mt_config_validate(&c, &e) || mt_params_build(&t, &c, &e))
		mt_die_err(&e);

	/* the batch */
	if (mt_npy_read(&tk, tokens, &e))
		mt_die_err(&e);
	T = c.seq_length;
	if (strcmp(tk.descr, "<i4") || tk.rows != 2 || !tk.cols || tk.cols % (size_t)T)
		mt_die(MT_EXIT_DATA, "'%s': want int32 of shape (2, B*%lld)", tokens, T);
	B = (long long)tk.cols / T;
	tok = tk.data;
	tgt = tok + tk.cols;
	for (size_t k = 0; k < tk.cols; k++)
		if (tok[k] < 0 || tok[k] >= c.vocab_size || tgt[k] < -1 || tgt[k] >= c.vocab_size)
			mt_die(MT_EXIT_DATA, "'%s': token or target %zu out of range", tokens, k);
	if (be.ops->init(&be, &c, &t, (int)B, &e))
		mt_die_err(&e);

	w = malloc((size_t)t.total * sizeof(float));
	g = calloc((size_t)t.total, sizeof(float));
	m = calloc((size_t)t.total, sizeof(float));
	v = calloc((size_t)t.total, sizeof(float));
	if (!w || !g || !m || !v)
		mt_die(MT_EXIT_IO, "out of memory");
	mt_params_init(&t, w, (uint64_t)seed);
	if (be.ops->load_state(&be, w, NULL, NULL, &e))
		mt_die_err(&e);

	/* the initial weights, as a checkpoint of iteration 0 */
	mkdir_or_die(out);
	cfg = mt_config_to_json(&c);
	memset(&st, 0, sizeof(st));
	st.config_json = cfg;
	snprintf(path, sizeof(path), "%s/ckpt", out);
	if (mt_ckpt_save(path, &t, w, NULL, NULL, &st, 0, &e))
		mt_die_err(&e);

	/* steps: forward, backward (the first one's gradients written), AdamW */
	snprintf(path, sizeof(path), "%s/losses.txt", out);
	if (!(f = fopen(path, "w")))
		mt_die(MT_EXIT_IO, "cannot create '%s': %s", path, strerror(errno));
	mt_adamw_init(&opt);
	opt.weight_decay = wd;
	for (long long s = 0; s < steps; s++) {
		be.ops->zero_grad(&be);
		loss = be.ops->step_micro(&be, tok, tgt, 1);
		if (be.ops->grad_prepare(&be, 1.0f, 0, &norm, &nonfinite, &e))
			mt_die_err(&e);
		fprintf(f, "%.17g\n", loss);
		if (s == 0) {
			if (be.ops->get_grad(&be, g, &e))
				mt_die_err(&e);
			loss0 = loss;
			snprintf(path, sizeof(path), "%s/grads", out);
			mkdir_or_die(path);
			for (int i = 0; i < t.n; i++) {
				const struct mt_param *p = &t.p[i];
				snprintf(path, sizeof(path), "%s/grads/%s.npy", out, p->name);
				if (mt_npy_write(path, "<f4", g + p->offset, (size_t)p->shape[0],
						 p->ndim == 2 ? (size_t)p->shape[1] : 0, &e))
					mt_die_err(&e);
			}
		}
		if (be.ops->adamw_step(&be, &opt, lr, &e))
			mt_die_err(&e);
	}
	if (be.ops->save_state(&be, w, m, v, &e))
		mt_die_err(&e);
	if (fclose(f))
		mt_die(MT_EXIT_IO, "cannot write '%s/losses.txt'", out);

	/* the weights after the steps */
	st.iteration = steps;
	st.optimizer_step = steps;
	snprintf(path, sizeof(path), "%s/ckpt", out);
	if (mt_ckpt_save(path, &t, w, NULL, NULL, &st, 0, &e))
		mt_die_err(&e);
	printf("B %lld T %lld params %lld loss %.9g\n", B, T, (long long)t.total, loss0);

	free(cfg);
	free(w), free(g), free(m), free(v);
	mt_npy_free(&tk);
	be.ops->free(&be);
	mt_params_free(&t);
	mt_opt_free(&o);
	return 0;
}
