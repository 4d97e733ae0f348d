/* Unit tests for lib/infer/infer_cuda.c: the CUDA inference engine against the CPU one
 * (lib/infer/infer_cpu.c, itself held to gpt.c's forward by test_infer.c) on random small
 * models, GPT-2 style (learned positions, LayerNorm, GELU, biases, tied output, head
 * size 64: the tensor-core attention in bf16) and Llama style (rope, RMSNorm, SwiGLU,
 * no biases, untied output, 4 heads in 2 groups of head size 32), in fp32 and bf16.
 * On a GPU only: without one (or in a build without CUDA) every case is reported
 * skipped.
 *
 * Four prompts of 37, 1, 90 and 64 tokens go into permuted slots with their
 * log-probabilities; then decode steps with ragged slots, the set of slots shrinking
 * from 4 to 2 (a CUDA graph per row count), the positions crossing the 64-position
 * splits of the decode attention; then two slots get new prompts (one longer than what
 * the slot held) and all four decode again, replaying the graphs with new inputs. Both
 * engines are fed the same tokens (the CPU's argmax), and every output is poisoned
 * (NaN) before each call. Decode steps of up to 32 rows run the fused kernels
 * (kernels/decode_linear.cu); a fourth engine with MT_DECODE_FUSED=0 runs them on the
 * prefill's kernels (the path of larger batches) and is held to the same limits. A
 * fifth engine takes the same steps through decode_sample (greedy, temperature, top-k,
 * top-p in turn): its ids must be mt_sample's on the graph engine's logits (the same
 * kernels on the same inputs: the same logits). Errors: logits max|gpu - cpu| / max|cpu| per call,
 * log-probabilities |gpu - cpu| / max(1, |cpu|). Limits: fp32 1e-4 (summation order
 * only; cuBLASLt computes fp32 without TF32), bf16 5e-2 (weights, activations and
 * cache rounded to bf16, 2^-9 relative each, through two layers). A third engine with
 * MT_CUDA_GRAPHS=0 must give the graphs' logits bit for bit, and the engine's checks
 * (slots, token ids, a full slot) must refuse. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infer/infer.h"
#include "infer/sample.h"
#include "tap.h"

#ifdef MT_HAVE_CUDA
#include <cuda_runtime_api.h>

#define NS 4
#define ML 128

static void model(struct mt_config *c, int llama)
{
	memset(c, 0, sizeof(*c));
	c->num_layers = 2;
	c->hidden_size = 128;
	c->num_attention_heads = llama ? 4 : 2;
	c->num_query_groups = llama ? 2 : 2;
	c->ffn_hidden_size = llama ? 192 : 512;
	c->seq_length = ML;
	c->max_position_embeddings = ML;
	c->vocab_size = 300;
	c->make_vocab_size_divisible_by = 64;
	c->add_bias_linear = !llama;
	c->position_embedding_type = llama ? MT_POS_ROPE : MT_POS_LEARNED;
	c->normalization = llama ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
	c->swiglu = llama;
	c->untie_embeddings_and_output_weights = llama;
	c->init_method_std = 0.08;
	mt_config_defaults(c);
}

static void poison(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
}

/* max|got - ref| / max|ref| over n; NaN anywhere gives infinity */
static double relerr(const float *got, const float *ref, int64_t n)
{
	double md = 0, mr = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - (double)ref[i]);
		if (!(d == d))
			return INFINITY;
		md = d > md ? d : md;
		mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
	}
	return mr > 0 ? md / mr : md;
}

static int32_t argmax(const float *z, int64_t n)
{
	int32_t b = 0;
	for (int64_t v = 1; v < n; v++)
		if (z[v] > z[b])
			b = (int32_t)v;
	return b;
}

static void check(int llama, int fp32)
{
	const char *name = llama ? (fp32 ? "llama fp32" : "llama bf16") : (fp32 ? "gpt2 fp32" : "gpt2 bf16");
	const struct mt_infer_ops *gops = fp32 ? &mt_infer_cuda_fp32 : &mt_infer_cuda;
	double lim = fp32 ? 1e-4 : 5e-2, w_pre = 0, w_lp = 0, w_dec = 0, w_re = 0;
	struct mt_config c;
	struct mt_params t;
	struct mt_infer ce, ge, ne, fe, se; /* CPU, GPU, GPU without graphs, without the fused kernels, sampling */
	const struct mt_sample_params sps[4] = { { 0, 0, 0 }, { 0.9, 0, 0 }, { 1, 7, 0 }, { 0.8, 0, 0.8 } };
	struct mt_sampler smp;
	double w_unf = 0;
	int ids_same = 1;
	struct mt_err err = { 0 };
	int lens[NS] = { 37, 1, 90, 64 }, slots[NS] = { 2, 0, 3, 1 }, stop[NS] = { 20, 5, 12, 20 };
	int32_t *tok[NS], next[NS];
	const int32_t *tp[NS];
	float *lpc[NS], *lpg[NS], *lpn[NS], *zc, *zg, *zn, *zf, *w;
	int64_t V, vocab;
	int steps = 0, graphs_same = 1, ok_calls = 1;

	model(&c, llama);
	if (mt_config_validate(&c, &err) || mt_params_build(&t, &c, &err)) {
		ok(0, "%s: set up: %s", name, err.msg);
		return;
	}
	V = c.padded_vocab_size;
	vocab = c.vocab_size;
	w = malloc((size_t)t.total * sizeof(float));
	mt_params_init(&t, w, 11);
	for (int64_t k = 0; k < t.total; k++)
		w[k] += (float)(0.05 * sin((double)k * 0.37));
	srand(5 + llama);
	for (int s = 0; s < NS; s++) {
		tok[s] = malloc(ML * sizeof(int32_t));
		for (int i = 0; i < ML; i++)
			tok[s][i] = rand() % (int)vocab;
		tp[s] = tok[s];
		lpc[s] = malloc(ML * sizeof(float));
		lpg[s] = malloc(ML * sizeof(float));
		lpn[s] = malloc(ML * sizeof(float));
	}
	zc = malloc((size_t)(NS * V) * sizeof(float));
	zg = malloc((size_t)(NS * V) * sizeof(float));
	zn = malloc((size_t)(NS * V) * sizeof(float));
	zf = malloc((size_t)(NS * V) * sizeof(float));
	mt_sampler_init(&smp, vocab, &err);
	if (mt_infer_cpu.init(&ce, &c, &t, w, NS, ML, &err) || gops->init(&ge, &c, &t, w, NS, ML, &err)) {
		ok(0, "%s: engine init: %s", name, err.msg);
		return;
	}
	setenv("MT_CUDA_GRAPHS", "0", 1);
	if (gops->init(&ne, &c, &t, w, NS, ML, &err)) {
		ok(0, "%s: engine init without graphs: %s", name, err.msg);
		return;
	}
	unsetenv("MT_CUDA_GRAPHS");
	setenv("MT_DECODE_FUSED", "0", 1);
	if (gops->init(&fe, &c, &t, w, NS, ML, &err)) {
		ok(0, "%s: engine init without the fused decode kernels: %s", name, err.msg);
		return;
	}
	unsetenv("MT_DECODE_FUSED");
	if (gops->init(&se, &c, &t, w, NS, ML, &err)) {
		ok(0, "%s: engine init for decode_sample: %s", name, err.msg);
		return;
	}
	ok(ge.ops->bytes(&ge) >= mt_infer_cuda_cache_bytes(&ge) &&
		   mt_infer_cuda_cache_bytes(&ge) >= mt_infer_cache_bytes(&c, NS, ML) / (fp32 ? 1 : 2),
	   "%s: bytes() %zu holds the cache of %zu", name, ge.ops->bytes(&ge), mt_infer_cuda_cache_bytes(&ge));

	/* prefill with log-probabilities */
	for (int s = 0; s < NS; s++) {
		poison(lpc[s], ML);
		poison(lpg[s], ML);
		poison(lpn[s], ML);
	}
	poison(zc, (size_t)(NS * V));
	poison(zg, (size_t)(NS * V));
	poison(zn, (size_t)(NS * V));
	ok_calls &= ce.ops->prefill(&ce, NS, slots, tp, lens, zc, lpc, &err) == 0;
	ok_calls &= ge.ops->prefill(&ge, NS, slots, tp, lens, zg, lpg, &err) == 0;
	ok_calls &= ne.ops->prefill(&ne, NS, slots, tp, lens, zn, lpn, &err) == 0;
	ok_calls &= fe.ops->prefill(&fe, NS, slots, tp, lens, zf, NULL, &err) == 0;
	ok_calls &= se.ops->prefill(&se, NS, slots, tp, lens, zf, NULL, &err) == 0;
	if (!ok(ok_calls, "%s: prefill of prompts of 37, 1, 90 and 64 tokens: %s", name, err.msg))
		return;
	w_pre = relerr(zg, zc, NS * V);
	for (int s = 0; s < NS; s++)
		for (int j = 0; j + 1 < lens[s]; j++) {
			double d = fabs((double)lpg[s][j] - lpc[s][j]) / fmax(1.0, fabs(lpc[s][j]));
			if (!(d <= w_lp)) /* NaN too */
				w_lp = d;
		}
	graphs_same &= relerr(zn, zg, NS * V) == 0;
	for (int s = 0; s < NS; s++)
		graphs_same &= relerr(lpn[s], lpg[s], lens[s] - 1) == 0;
	ok(w_pre <= lim, "%s: prefill logits, relative error %.3g (limit %g)", name, w_pre, lim);
	ok(w_lp <= lim, "%s: prompt log-probabilities, relative error %.3g (limit %g)", name, w_lp, lim);

	/* decode: every slot from the CPU's argmax, the shorter runs stopping first */
	{
		int act[NS], n = NS;
		for (int k = 0; k < NS; k++) {
			act[k] = k;
			next[k] = argmax(zc + k * V, vocab);
		}
		for (int it = 0; n > 0; it++) {
			int sl[NS], m = 0;
			int32_t tk[NS];
			for (int k = 0; k < n; k++)
				if (it < stop[act[k]]) {
					sl[m] = slots[act[k]];
					tk[m] = next[act[k]];
					act[m++] = act[k];
				}
			n = m;
			if (!n)
				break;
			poison(zc, (size_t)(n * V));
			poison(zg, (size_t)(n * V));
			poison(zn, (size_t)(n * V));
			ok_calls &= ce.ops->decode(&ce, n, sl, tk, zc, &err) == 0;
			ok_calls &= ge.ops->decode(&ge, n, sl, tk, zg, &err) == 0;
			ok_calls &= ne.ops->decode(&ne, n, sl, tk, zn, &err) == 0;
			poison(zf, (size_t)(n * V));
			ok_calls &= fe.ops->decode(&fe, n, sl, tk, zf, &err) == 0;
			{
				const struct mt_sample_params *sp = &sps[it % 4];
				double u[NS];
				int32_t ids[NS];
				for (int k = 0; k < n; k++)
					u[k] = mt_sample_uniform(3, (uint64_t)sl[k], (uint64_t)it);
				ok_calls &= se.ops->decode_sample(&se, n, sl, tk, sp, u, ids, &err) == 0;
				for (int k = 0; k < n && ok_calls; k++)
					if (ids[k] != mt_sample(&smp, zg + k * V, sp, u[k])) {
						if (ids_same)
							printf("#   step %d row %d (T %g, top-k %d, top-p %g): %d against %d\n", it, k,
							       sp->temperature, sp->top_k, sp->top_p, (int)ids[k],
							       (int)mt_sample(&smp, zg + k * V, sp, u[k]));
						ids_same = 0;
					}
			}
			if (!ok_calls)
				break;
			for (int k = 0; k < n; k++) {
				double d = relerr(zg + k * V, zc + k * V, V);
				w_dec = d > w_dec ? d : w_dec;
				d = relerr(zf + k * V, zc + k * V, V);
				w_unf = d > w_unf ? d : w_unf;
				next[act[k]] = argmax(zc + k * V, vocab);
			}
			graphs_same &= relerr(zn, zg, n * V) == 0;
			steps++;
		}
	}
	ok(ok_calls, "%s: %d decode steps of 4, 3 and 2 ragged slots: %s", name, steps, err.msg);
	ok(w_dec <= lim, "%s: decode logits, relative error %.3g (limit %g)", name, w_dec, lim);
	ok(w_unf <= lim, "%s: decode logits on the prefill's kernels (MT_DECODE_FUSED=0), relative error %.3g (limit %g)",
	   name, w_unf, lim);
	ok(ids_same, "%s: decode_sample's ids (greedy, temperature, top-k, top-p) are mt_sample's on the same logits", name);

	/* new prompts in two slots (slot 0 held 1 + 5 tokens, now 50; slot 2 held 37 + 20,
	 * now 3), then every slot decodes again */
	{
		int rs[2] = { 0, 2 }, rl[2] = { 50, 3 };
		const int32_t *rt[2] = { tok[2] + 10, tok[3] + 7 };
		int sl[NS] = { 0, 1, 2, 3 };
		int32_t tk[NS];
		poison(zc, (size_t)(NS * V));
		poison(zg, (size_t)(NS * V));
		ok_calls &= ce.ops->prefill(&ce, 2, rs, rt, rl, zc, NULL, &err) == 0;
		ok_calls &= ge.ops->prefill(&ge, 2, rs, rt, rl, zg, NULL, &err) == 0;
		ok_calls &= ne.ops->prefill(&ne, 2, rs, rt, rl, zn, NULL, &err) == 0;
		w_re = relerr(zg, zc, 2 * V);
		for (int k = 0; k < NS; k++)
			tk[k] = (int32_t)((k * 37 + 11) % vocab);
		for (int it = 0; it < 6 && ok_calls; it++) {
			poison(zc, (size_t)(NS * V));
			poison(zg, (size_t)(NS * V));
			poison(zn, (size_t)(NS * V));
			ok_calls &= ce.ops->decode(&ce, NS, sl, tk, zc, &err) == 0;
			ok_calls &= ge.ops->decode(&ge, NS, sl, tk, zg, &err) == 0;
			ok_calls &= ne.ops->decode(&ne, NS, sl, tk, zn, &err) == 0;
			for (int k = 0; k < NS && ok_calls; k++) {
				double d = relerr(zg + k * V, zc + k * V, V);
				w_re = d > w_re ? d : w_re;
				tk[k] = argmax(zc + k * V, vocab);
			}
			graphs_same &= relerr(zn, zg, NS * V) == 0;
		}
	}
	ok(ok_calls && w_re <= lim, "%s: new prompts in used slots, then 6 steps of all 4: relative error %.3g (limit %g)%s%s",
	   name, w_re, lim, ok_calls ? "" : ": ", ok_calls ? "" : err.msg);
	ok(graphs_same, "%s: an engine launching one kernel at a time gives the CUDA graphs' logits bit for bit", name);

	/* the checks */
	{
		int bad_slot = NS, full = ML, s0 = 0;
		int32_t bad_tok = (int32_t)V, t0 = 1;
		int32_t *longp = malloc(ML * sizeof(int32_t));
		const int32_t *ft[1] = { longp };
		for (int i = 0; i < ML; i++)
			longp[i] = tok[i % NS][i];
		ok(ge.ops->decode(&ge, 1, &bad_slot, &t0, zg, &err) != 0 && strstr(err.msg, "slot 4 outside"),
		   "%s: a slot outside the batch is refused: %s", name, err.msg);
		ok(ge.ops->decode(&ge, 1, &s0, &bad_tok, zg, &err) != 0 && strstr(err.msg, "outside the vocabulary"),
		   "%s: a token outside the vocabulary is refused: %s", name, err.msg);
		ok(ge.ops->prefill(&ge, 1, &s0, ft, &full, zg, NULL, &err) == 0 &&
			   ge.ops->decode(&ge, 1, &s0, &t0, zg, &err) != 0 && strstr(err.msg, "is full"),
		   "%s: a decode step on a full slot is refused: %s", name, err.msg);
		free(longp);
	}

	ce.ops->free(&ce);
	ge.ops->free(&ge);
	ne.ops->free(&ne);
	fe.ops->free(&fe);
	se.ops->free(&se);
	mt_sampler_free(&smp);
	free(zf);
	for (int s = 0; s < NS; s++) {
		free(tok[s]);
		free(lpc[s]);
		free(lpg[s]);
		free(lpn[s]);
	}
	free(zc);
	free(zg);
	free(zn);
	free(w);
	mt_params_free(&t);
}

int main(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		tap_skip("no CUDA device", "CUDA inference engine");
		return tap_done();
	}
	for (int llama = 0; llama < 2; llama++)
		for (int fp32 = 1; fp32 >= 0; fp32--)
			check(llama, fp32);
	return tap_done();
}

#else

int main(void)
{
	tap_skip("built without CUDA", "CUDA inference engine");
	return tap_done();
}

#endif
