/* gpt_impl.h: the body of gpt.c, included once per precision with REAL, GEMM and SFX
 * defined (float/cblas_sgemm/_f32 and double/cblas_dgemm/_f64). Not a header to include
 * elsewhere: no guard on purpose. */

struct SFX(dims) {
	int64_t B, T, N, L, h, np, ng, hd, q, kv, qkv, f, fc1, V;
	/* tensor parallelism (t 1 without): this rank's heads, groups, ffn columns and
	 * vocabulary rows above; Vg the padded vocabulary, v0 the first of this rank's rows;
	 * the residual stream's rows: all N, or with sequence parallelism Nr = N / t from r0 */
	int64_t t, rank, sp, Nr, r0, Vg, v0;
};

static struct SFX(dims) SFX(dims_of)(const struct mt_config *c, const struct mt_tp *tp, int B, int T)
{
	struct SFX(dims) d;
	int64_t t = mt_tp_on(tp) ? tp->size : 1;

	d.B = B;
	d.T = T;
	d.N = (int64_t)B * T;
	d.L = c->num_layers;
	d.h = c->hidden_size;
	d.np = c->num_attention_heads / t;
	d.ng = c->num_query_groups / t;
	d.hd = c->kv_channels;
	d.q = d.np * d.hd;
	d.kv = d.ng * d.hd;
	d.qkv = d.q + 2 * d.kv;
	d.f = c->ffn_hidden_size / t;
	d.fc1 = c->swiglu ? 2 * d.f : d.f;
	d.Vg = c->padded_vocab_size;
	d.V = d.Vg / t;
	d.t = t;
	d.rank = t > 1 ? tp->rank : 0;
	d.v0 = d.rank * d.V;
	d.sp = t > 1 && tp->sequence_parallel;
	d.Nr = d.sp ? d.N / t : d.N;
	d.r0 = d.sp ? d.rank * d.Nr : 0;
	return d;
}

/* The split points (tp.h). The fp64 instantiation (gradient checks) runs on one rank
 * only, so the casts to float are never taken there. Each returns 0 or -1. */

/* partial sums [N][w] of every rank: out gets the rows this rank keeps, [Nr][w] (an
 * all-reduce, or with sequence parallelism a reduce-scatter); out may be part */
static int SFX(tp_reduce)(const struct SFX(dims) *d, const struct mt_tp *tp, REAL *out, REAL *part, int64_t w)
{
	if (d->sp)
		return tp->reduce_scatter(tp->ctx, (float *)(void *)out, (const float *)(void *)part, d->Nr * w);
	if (tp->allreduce(tp->ctx, (float *)(void *)part, d->N * w))
		return -1;
	if (out != part)
		memcpy(out, part, (size_t)(d->N * w) * sizeof(REAL));
	return 0;
}

/* this rank's rows [Nr][w] as all N rows: gathered into full with sequence
 * parallelism, the rows themselves without */
static const REAL *SFX(tp_gather)(const struct SFX(dims) *d, const struct mt_tp *tp, REAL *full, const REAL *rows,
				  int64_t w, int *bad)
{
	if (!d->sp)
		return rows;
	if (tp->allgather(tp->ctx, (float *)(void *)full, (const float *)(void *)rows, d->Nr * w))
		*bad = 1;
	return full;
}

#define V_(a, i) ((REAL *)(a)->p[i])

/* row offset of query head hh, and of the key and value heads of its group, in a qkv row */
static inline int64_t SFX(qoff)(const struct SFX(dims) *d, int64_t hh)
{
	int64_t per = d->np / d->ng, g = hh / per;
	return (g * (per + 2) + hh % per) * d->hd;
}
static inline int64_t SFX(koff)(const struct SFX(dims) *d, int64_t g) { return (g * (d->np / d->ng + 2) + d->np / d->ng) * d->hd; }
static inline int64_t SFX(voff)(const struct SFX(dims) *d, int64_t g) { return SFX(koff)(d, g) + d->hd; }

static const REAL *SFX(param)(const struct mt_params *t, const REAL *w, int layer, enum mt_param_kind k)
{
	const struct mt_param *p = mt_params_get(t, layer, k);
	return p ? w + p->offset : NULL;
}

static REAL *SFX(grad)(const struct mt_params *t, REAL *g, int layer, enum mt_param_kind k)
{
	const struct mt_param *p = mt_params_get(t, layer, k);
	return p ? g + p->offset : NULL;
}

/* out[N,O] = in[N,IN] @ W[O,IN]^T + b */
static void SFX(linear)(REAL *out, const REAL *in, const REAL *W, const REAL *b, int64_t N, int64_t IN, int64_t O)
{
	GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)O, (int)IN, 1, in, (int)IN, W, (int)IN, 0, out, (int)O);
	if (b) {
		#pragma omp parallel for
		for (int64_t n = 0; n < N; n++)
			for (int64_t o = 0; o < O; o++)
				out[n * O + o] += b[o];
	}
}

/* din[N,IN] (+)= dout @ W; dW += dout^T @ in; db += sum of dout rows (dW NULL: the
 * input's gradient only, the B pass of a split backward) */
static void SFX(linear_back)(REAL *din, int accumulate, REAL *dW, REAL *db, const REAL *dout, const REAL *in,
			     const REAL *W, int64_t N, int64_t IN, int64_t O)
{
	if (din)
		GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)IN, (int)O, 1, dout, (int)O, W, (int)IN,
		     accumulate ? 1 : 0, din, (int)IN);
	if (!dW)
		return;
	GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)O, (int)IN, (int)N, 1, dout, (int)O, in, (int)IN, 1, dW, (int)IN);
	if (db)
		for (int64_t n = 0; n < N; n++)
			for (int64_t o = 0; o < O; o++)
				db[o] += dout[n * O + o];
}

/* LayerNorm / RMSNorm over rows of h; stats[2n] = mean (0 for RMS), stats[2n+1] = rstd */
static void SFX(norm)(REAL *out, REAL *stats, const REAL *x, const REAL *w, const REAL *b, int64_t N, int64_t h,
		      int rms, double eps)
{
	#pragma omp parallel for if (N > 1) /* one row: a decode step of infer_cpu.c */
	for (int64_t n = 0; n < N; n++) {
		const REAL *xr = x + n * h;
		double mean = 0, var = 0, rstd;
		if (!rms) {
			for (int64_t i = 0; i < h; i++)
				mean += xr[i];
			mean /= (double)h;
		}
		for (int64_t i = 0; i < h; i++)
			var += ((double)xr[i] - mean) * ((double)xr[i] - mean);
		var /= (double)h;
		rstd = 1.0 / sqrt(var + eps);
		stats[2 * n] = (REAL)mean;
		stats[2 * n + 1] = (REAL)rstd;
		for (int64_t i = 0; i < h; i++)
			out[n * h + i] = (REAL)(((double)xr[i] - mean) * rstd) * w[i] + (b ? b[i] : 0);
	}
}

static void SFX(norm_back)(REAL *dx, REAL *dw, REAL *db, const REAL *dout, const REAL *x, const REAL *stats,
			   const REAL *w, int64_t N, int64_t h, int rms)
{
	for (int64_t n = 0; n < N; n++) {
		const REAL *xr = x + n * h, *dr = dout + n * h;
		double mean = stats[2 * n], rstd = stats[2 * n + 1], sdy = 0, sdyx = 0;
		for (int64_t i = 0; i < h; i++) {
			double xhat = ((double)xr[i] - mean) * rstd, dy = (double)dr[i] * w[i];
			sdy += dy;
			sdyx += dy * xhat;
			dw[i] += (REAL)(dr[i] * xhat);
			if (db)
				db[i] += dr[i];
		}
		sdy /= (double)h;
		sdyx /= (double)h;
		for (int64_t i = 0; i < h; i++) {
			double xhat = ((double)xr[i] - mean) * rstd, dy = (double)dr[i] * w[i];
			dx[n * h + i] += (REAL)(rstd * (dy - (rms ? 0 : sdy) - xhat * sdyx));
		}
	}
}

/* rotary embedding on every query and key head of a qkv buffer; inverse = 1 undoes it */
static void SFX(rope)(REAL *qkv, const struct SFX(dims) *d, double base, int inverse)
{
	int64_t half = d->hd / 2;

	#pragma omp parallel for
	for (int64_t n = 0; n < d->N; n++) {
		int64_t t = n % d->T;
		for (int64_t hh = 0; hh < d->np + d->ng; hh++) {
			REAL *x = qkv + n * d->qkv + (hh < d->np ? SFX(qoff)(d, hh) : SFX(koff)(d, hh - d->np));
			for (int64_t i = 0; i < half; i++) {
				double ang = (double)t * pow(base, -2.0 * (double)i / (double)d->hd);
				double cs = cos(ang), sn = inverse ? -sin(ang) : sin(ang);
				double x1 = x[i], x2 = x[i + half];
				x[i] = (REAL)(x1 * cs - x2 * sn);
				x[i + half] = (REAL)(x2 * cs + x1 * sn);
			}
		}
	}
}

/* causal attention: att[b][hh][i][j] probabilities, y[n][hh*hd] outputs */
static void SFX(attention)(REAL *y, REAL *att, const REAL *qkv, const struct SFX(dims) *d)
{
	double scale = 1.0 / sqrt((double)d->hd);
	int64_t per = d->np / d->ng;

	#pragma omp parallel for collapse(2)
	for (int64_t b = 0; b < d->B; b++)
		for (int64_t hh = 0; hh < d->np; hh++) {
			int64_t g = hh / per;
			for (int64_t i = 0; i < d->T; i++) {
				const REAL *q = qkv + (b * d->T + i) * d->qkv + SFX(qoff)(d, hh);
				REAL *p = att + ((b * d->np + hh) * d->T + i) * d->T;
				double mx = -1e300, sum = 0;
				for (int64_t j = 0; j <= i; j++) {
					const REAL *k = qkv + (b * d->T + j) * d->qkv + SFX(koff)(d, g);
					double s = 0;
					for (int64_t e = 0; e < d->hd; e++)
						s += (double)q[e] * k[e];
					p[j] = (REAL)(s * scale);
					if (p[j] > mx)
						mx = p[j];
				}
				for (int64_t j = 0; j <= i; j++) {
					double e = exp((double)p[j] - mx);
					p[j] = (REAL)e;
					sum += e;
				}
				for (int64_t j = 0; j <= i; j++)
					p[j] = (REAL)(p[j] / sum);
				for (int64_t j = i + 1; j < d->T; j++)
					p[j] = 0;
				{
					/* y = p . v: rows of v in order (contiguous reads), each element's
					 * sum over j in ascending order as before */
					REAL *yr = y + (b * d->T + i) * d->q + hh * d->hd;
					double acc[d->hd];
					for (int64_t e = 0; e < d->hd; e++)
						acc[e] = 0;
					for (int64_t j = 0; j <= i; j++) {
						const REAL *v = qkv + (b * d->T + j) * d->qkv + SFX(voff)(d, g);
						double pj = (double)p[j];
						for (int64_t e = 0; e < d->hd; e++)
							acc[e] += pj * v[e];
					}
					for (int64_t e = 0; e < d->hd; e++)
						yr[e] = (REAL)acc[e];
				}
			}
		}
}

static void SFX(attention_back)(REAL *dqkv, const REAL *dy, const REAL *att, const REAL *qkv, const struct SFX(dims) *d)
{
	double scale = 1.0 / sqrt((double)d->hd);
	int64_t per = d->np / d->ng;

	/* one task per (sequence, key/value group): the heads of a group share its key and
	 * value gradients, so they stay in one thread and the sums keep a fixed order */
	#pragma omp parallel for collapse(2)
	for (int64_t b = 0; b < d->B; b++)
		for (int64_t g = 0; g < d->ng; g++) {
			double *dp = malloc((size_t)d->T * sizeof(double));
			for (int64_t hh = g * per; hh < (g + 1) * per; hh++)
				for (int64_t i = 0; i < d->T; i++) {
					const REAL *p = att + ((b * d->np + hh) * d->T + i) * d->T;
					const REAL *dyr = dy + (b * d->T + i) * d->q + hh * d->hd;
					const REAL *q = qkv + (b * d->T + i) * d->qkv + SFX(qoff)(d, hh);
					REAL *dq = dqkv + (b * d->T + i) * d->qkv + SFX(qoff)(d, hh);
					double dot = 0;
					for (int64_t j = 0; j <= i; j++) {
						const REAL *v = qkv + (b * d->T + j) * d->qkv + SFX(voff)(d, g);
						REAL *dv = dqkv + (b * d->T + j) * d->qkv + SFX(voff)(d, g);
						double sdp = 0;
						for (int64_t e = 0; e < d->hd; e++) {
							sdp += (double)dyr[e] * v[e];
							dv[e] += (REAL)(p[j] * dyr[e]);
						}
						dp[j] = sdp;
						dot += p[j] * sdp;
					}
					for (int64_t j = 0; j <= i; j++) {
						double ds = p[j] * (dp[j] - dot) * scale;
						const REAL *k = qkv + (b * d->T + j) * d->qkv + SFX(koff)(d, g);
						REAL *dk = dqkv + (b * d->T + j) * d->qkv + SFX(koff)(d, g);
						for (int64_t e = 0; e < d->hd; e++) {
							dq[e] += (REAL)(ds * k[e]);
							dk[e] += (REAL)(ds * q[e]);
						}
					}
				}
			free(dp);
		}
}

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */

static void SFX(activation)(REAL *out, const REAL *in, const struct SFX(dims) *d, int swiglu)
{
	#pragma omp parallel for
	for (int64_t n = 0; n < d->N; n++)
		for (int64_t i = 0; i < d->f; i++) {
			if (swiglu) {
				double a = in[n * d->fc1 + i], b = in[n * d->fc1 + d->f + i];
				out[n * d->f + i] = (REAL)(a / (1 + exp(-a)) * b);
			} else {
				double x = in[n * d->f + i];
				out[n * d->f + i] = (REAL)(0.5 * x * (1 + tanh(GELU_C * (x + 0.044715 * x * x * x))));
			}
		}
}

static void SFX(activation_back)(REAL *din, const REAL *dout, const REAL *in, const struct SFX(dims) *d, int swiglu)
{
	#pragma omp parallel for
	for (int64_t n = 0; n < d->N; n++)
		for (int64_t i = 0; i < d->f; i++) {
			double g = dout[n * d->f + i];
			if (swiglu) {
				double a = in[n * d->fc1 + i], b = in[n * d->fc1 + d->f + i], s = 1 / (1 + exp(-a));
				din[n * d->fc1 + i] = (REAL)(g * b * s * (1 + a * (1 - s)));
				din[n * d->fc1 + d->f + i] = (REAL)(g * a * s);
			} else {
				double x = in[n * d->f + i], u = GELU_C * (x + 0.044715 * x * x * x), th = tanh(u);
				din[n * d->f + i] = (REAL)(g * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * GELU_C * (1 + 3 * 0.044715 * x * x)));
			}
		}
}

/* Cross-entropy over the vocabulary split across tensor-parallel ranks (Megatron's
 * vocab-parallel cross-entropy: row maxima and sums of exponentials all-reduced, no rank
 * holding all logits), with label smoothing eps over the padded vocabulary K: the loss
 * is (1 - s) (-log p_target) - s mean_v log p_v with s = eps K / (K - 1). On one rank
 * without smoothing the forward pass keeps its original loop (below). The probabilities
 * replace the logits in place, for the backward pass; loss[n] gets each row's loss. */
static int SFX(vocab_xent)(const struct SFX(dims) *d, const struct mt_tp *tp, REAL *logits, const int32_t *targets,
			   double eps, double *loss)
{
	int tpon = d->t > 1;
	double *mx = malloc((size_t)d->N * 3 * sizeof(double)), *sum = mx + d->N, *slog = sum + d->N;
	double K = (double)d->Vg, sm = eps > 0 ? eps * K / (K - 1) : 0;
	int rc = 0;

	if (!mx)
		return -1;
	#pragma omp parallel for
	for (int64_t n = 0; n < d->N; n++) {
		const REAL *z = logits + n * d->V;
		double m = -1e300;
		for (int64_t v = 0; v < d->V; v++)
			if (z[v] > m)
				m = z[v];
		mx[n] = m;
	}
	if (tpon && tp->allreduce_f64(tp->ctx, mx, d->N, 1))
		rc = -1;
	#pragma omp parallel for
	for (int64_t n = 0; n < d->N; n++) {
		REAL *z = logits + n * d->V;
		double s = 0;
		for (int64_t v = 0; v < d->V; v++) {
			double e = exp((double)z[v] - mx[n]);
			z[v] = (REAL)e;
			s += e;
		}
		sum[n] = s;
	}
	if (rc == 0 && tpon && tp->allreduce_f64(tp->ctx, sum, d->N, 0))
		rc = -1;
	#pragma omp parallel for
	for (int64_t n = 0; n < d->N; n++) {
		REAL *z = logits + n * d->V;
		int64_t y = (int64_t)targets[n] - d->v0;
		double sl = 0;
		for (int64_t v = 0; v < d->V; v++) {
			z[v] = (REAL)(z[v] / sum[n]);
			if (sm > 0)
				sl += log(z[v] > 1e-300 ? (double)z[v] : 1e-300);
		}
		/* the target's owner gives -log p; the others 0, so the sum is exact */
		loss[n] = targets[n] >= 0 && y >= 0 && y < d->V ? -log(z[y] > 1e-300 ? (double)z[y] : 1e-300) : 0;
		slog[n] = sl;
	}
	if (rc == 0 && tpon && tp->allreduce_f64(tp->ctx, loss, d->N, 0))
		rc = -1;
	if (rc == 0 && tpon && sm > 0 && tp->allreduce_f64(tp->ctx, slog, d->N, 0))
		rc = -1;
	if (sm > 0)
		for (int64_t n = 0; n < d->N; n++)
			loss[n] = (1 - sm) * loss[n] - sm * slog[n] / K;
	free(mx);
	return rc;
}

double SFX(mt_gpt_stage_forward)(const struct mt_config *c, const struct mt_params *t, const REAL *w,
				 const int32_t *tokens, const int32_t *targets, const REAL *in_act, REAL *out_act,
				 struct mt_gpt_acts *a, int64_t *ntargets)
{
	const struct mt_tp *tp = a->tp;
	const struct mt_gpt_stage *st = &a->st;
	struct SFX(dims) d = SFX(dims_of)(c, tp, a->B, a->T);
	int rms = c->normalization == MT_NORM_RMSNORM, tpon = d.t > 1, bad = 0;
	const REAL *wte = SFX(param)(t, w, -1, MT_P_WORD_EMB), *wpe = SFX(param)(t, w, -1, MT_P_POS_EMB);
	const REAL *wout = c->untie_embeddings_and_output_weights ? SFX(param)(t, w, -1, MT_P_OUTPUT) : wte;
	REAL *x = V_(a, A_RESID), *logits = V_(a, A_LOGITS);
	REAL *full = tpon ? V_(a, A_FULL) : NULL, *part = tpon ? V_(a, A_PART) : NULL;
	double loss = 0;
	int64_t count = 0, Nr = d.Nr, l0 = st->l0, nl = st->l1 - st->l0;

	a->failed = 0;
	if (ntargets)
		*ntargets = 0;
	if (tpon && sizeof(REAL) != sizeof(float)) {
		a->failed = 1;
		return NAN;
	}
	/* a later stage starts from the activation it was sent */
	if (!st->first) {
		memcpy(x, in_act, (size_t)(Nr * d.h) * sizeof(REAL));
	} else if (!tpon) {
		/* embeddings into resid[0]: with tensor parallelism each rank looks up the ids
		 * of its vocabulary rows (zeros for the others) and the partial rows are summed */
		for (int64_t n = 0; n < d.N; n++)
			for (int64_t i = 0; i < d.h; i++)
				x[n * d.h + i] = wte[(int64_t)tokens[n] * d.h + i] + (wpe ? wpe[(n % d.T) * d.h + i] : 0);
	} else {
		for (int64_t n = 0; n < d.N; n++) {
			int64_t id = (int64_t)tokens[n] - d.v0;
			for (int64_t i = 0; i < d.h; i++)
				part[n * d.h + i] = id >= 0 && id < d.V ? wte[id * d.h + i] : 0;
		}
		if (SFX(tp_reduce)(&d, tp, x, part, d.h))
			goto fail;
		if (wpe)
			for (int64_t n = 0; n < Nr; n++)
				for (int64_t i = 0; i < d.h; i++)
					x[n * d.h + i] += wpe[((d.r0 + n) % d.T) * d.h + i];
	}
	for (int64_t l = l0; l < l0 + nl; l++) {
		/* activations by the stage's own layer index, parameters by the global one */
		int64_t sl = l - l0;
		REAL *xin = V_(a, A_RESID) + sl * Nr * d.h, *xout = xin + Nr * d.h;
		REAL *ln1 = V_(a, A_LN1) + sl * Nr * d.h, *ln1s = V_(a, A_LN1S) + sl * Nr * 2;
		REAL *qkv = V_(a, A_QKV) + sl * d.N * d.qkv, *att = V_(a, A_ATT) + sl * d.B * d.np * d.T * d.T;
		REAL *atty = V_(a, A_ATTY) + sl * d.N * d.q, *mid = V_(a, A_MID) + sl * Nr * d.h;
		REAL *ln2 = V_(a, A_LN2) + sl * Nr * d.h, *ln2s = V_(a, A_LN2S) + sl * Nr * 2;
		REAL *fc1 = V_(a, A_FC1) + sl * d.N * d.fc1, *act = V_(a, A_ACT) + sl * d.N * d.f;
		const REAL *in;

		SFX(norm)(ln1, ln1s, xin, SFX(param)(t, w, (int)l, MT_P_LN1_W), SFX(param)(t, w, (int)l, MT_P_LN1_B), Nr, d.h,
			  rms, c->norm_epsilon);
		/* column-parallel QKV: the input whole on every rank (gathered with SP) */
		in = tpon ? SFX(tp_gather)(&d, tp, full, ln1, d.h, &bad) : ln1;
		if (bad)
			goto fail;
		SFX(linear)(qkv, in, SFX(param)(t, w, (int)l, MT_P_QKV_W), SFX(param)(t, w, (int)l, MT_P_QKV_B), d.N, d.h, d.qkv);
		if (c->position_embedding_type == MT_POS_ROPE)
			SFX(rope)(qkv, &d, c->rotary_base, 0);
		SFX(attention)(atty, att, qkv, &d);
		if (!tpon) {
			SFX(linear)(mid, atty, SFX(param)(t, w, (int)l, MT_P_PROJ_W), SFX(param)(t, w, (int)l, MT_P_PROJ_B), d.N, d.q, d.h);
		} else {
			/* row-parallel projection: partial products summed, the bias added once */
			const REAL *bp = SFX(param)(t, w, (int)l, MT_P_PROJ_B);
			SFX(linear)(part, atty, SFX(param)(t, w, (int)l, MT_P_PROJ_W), NULL, d.N, d.q, d.h);
			if (SFX(tp_reduce)(&d, tp, mid, part, d.h))
				goto fail;
			if (bp)
				for (int64_t n = 0; n < Nr; n++)
					for (int64_t i = 0; i < d.h; i++)
						mid[n * d.h + i] += bp[i];
		}
		for (int64_t k = 0; k < Nr * d.h; k++)
			mid[k] += xin[k];
		SFX(norm)(ln2, ln2s, mid, SFX(param)(t, w, (int)l, MT_P_LN2_W), SFX(param)(t, w, (int)l, MT_P_LN2_B), Nr, d.h,
			  rms, c->norm_epsilon);
		in = tpon ? SFX(tp_gather)(&d, tp, full, ln2, d.h, &bad) : ln2;
		if (bad)
			goto fail;
		SFX(linear)(fc1, in, SFX(param)(t, w, (int)l, MT_P_FC1_W), SFX(param)(t, w, (int)l, MT_P_FC1_B), d.N, d.h, d.fc1);
		SFX(activation)(act, fc1, &d, c->swiglu);
		if (!tpon) {
			SFX(linear)(xout, act, SFX(param)(t, w, (int)l, MT_P_FC2_W), SFX(param)(t, w, (int)l, MT_P_FC2_B), d.N, d.f, d.h);
		} else {
			const REAL *bp = SFX(param)(t, w, (int)l, MT_P_FC2_B);
			SFX(linear)(part, act, SFX(param)(t, w, (int)l, MT_P_FC2_W), NULL, d.N, d.f, d.h);
			if (SFX(tp_reduce)(&d, tp, xout, part, d.h))
				goto fail;
			if (bp)
				for (int64_t n = 0; n < Nr; n++)
					for (int64_t i = 0; i < d.h; i++)
						xout[n * d.h + i] += bp[i];
		}
		for (int64_t k = 0; k < Nr * d.h; k++)
			xout[k] += mid[k];
	}
	if (!st->last) {
		/* the activation the next stage starts from */
		memcpy(out_act, V_(a, A_RESID) + nl * Nr * d.h, (size_t)(Nr * d.h) * sizeof(REAL));
		return 0;
	}
	SFX(norm)(V_(a, A_LNF), V_(a, A_LNFS), V_(a, A_RESID) + nl * Nr * d.h, SFX(param)(t, w, -1, MT_P_FINAL_W),
		  SFX(param)(t, w, -1, MT_P_FINAL_B), Nr, d.h, rms, c->norm_epsilon);
	{
		/* the output layer: this rank's vocabulary rows of the logits */
		const REAL *in = tpon ? SFX(tp_gather)(&d, tp, full, V_(a, A_LNF), d.h, &bad) : V_(a, A_LNF);
		if (bad)
			goto fail;
		SFX(linear)(logits, in, wout, NULL, d.N, d.h, d.V);
	}
	if (tpon || a->label_smoothing > 0) {
		double *rl = malloc((size_t)d.N * sizeof(double));
		if (!rl || SFX(vocab_xent)(&d, tp, logits, targets, a->label_smoothing, rl)) {
			free(rl);
			goto fail;
		}
		for (int64_t n = 0; n < d.N; n++)
			if (targets[n] >= 0) {
				loss += rl[n];
				count++;
			}
		free(rl);
	} else {
		/* softmax in place; cross-entropy of the counted targets (summed in row order) */
		#pragma omp parallel for
		for (int64_t n = 0; n < d.N; n++) {
			REAL *z = logits + n * d.V;
			double mx = -1e300, sum = 0;
			for (int64_t v = 0; v < d.V; v++)
				if (z[v] > mx)
					mx = z[v];
			for (int64_t v = 0; v < d.V; v++) {
				double e = exp((double)z[v] - mx);
				z[v] = (REAL)e;
				sum += e;
			}
			for (int64_t v = 0; v < d.V; v++)
				z[v] = (REAL)(z[v] / sum);
		}
		for (int64_t n = 0; n < d.N; n++)
			if (targets[n] >= 0) {
				double pt = logits[n * d.V + targets[n]];
				loss += -log(pt > 1e-300 ? pt : 1e-300);
				count++;
			}
	}
	if (ntargets)
		*ntargets = count;
	return count ? loss / (double)count : 0;
fail:
	a->failed = 1;
	return NAN;
}

double SFX(mt_gpt_forward)(const struct mt_config *c, const struct mt_params *t, const REAL *w,
			   const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, int64_t *ntargets)
{
	return SFX(mt_gpt_stage_forward)(c, t, w, tokens, targets, NULL, NULL, a, ntargets);
}

/* Sequence parallelism leaves the gradients of replicated parameters partial on each
 * rank (params.h tp_grad_reduce): this micro-batch's share is summed over the group.
 * keep saves what earlier micro-batches accumulated, so only the new share is summed. */
static int SFX(tp_grad_begin)(const struct mt_params *t, REAL *g, REAL **keep)
{
	int64_t n = 0, k = 0;

	for (int i = 0; i < t->n; i++)
		n += t->p[i].tp_grad_reduce ? t->p[i].numel : 0;
	*keep = NULL;
	if (!n)
		return 0;
	if (!(*keep = malloc((size_t)n * sizeof(REAL))))
		return -1;
	for (int i = 0; i < t->n; i++)
		if (t->p[i].tp_grad_reduce) {
			memcpy(*keep + k, g + t->p[i].offset, (size_t)t->p[i].numel * sizeof(REAL));
			memset(g + t->p[i].offset, 0, (size_t)t->p[i].numel * sizeof(REAL));
			k += t->p[i].numel;
		}
	return 0;
}

static int SFX(tp_grad_end)(const struct mt_params *t, const struct mt_tp *tp, REAL *g, REAL *keep)
{
	int64_t k = 0;
	int rc = 0;

	if (!keep)
		return 0;
	for (int i = 0; i < t->n && rc == 0; i++) {
		const struct mt_param *p = &t->p[i];
		if (!p->tp_grad_reduce)
			continue;
		rc = tp->allreduce(tp->ctx, (float *)(void *)(g + p->offset), p->numel);
		for (int64_t e = 0; e < p->numel; e++)
			g[p->offset + e] += keep[k + e];
		k += p->numel;
	}
	free(keep);
	return rc;
}

/* db += the column sums of rows [n][w] */
static void SFX(bias_back)(REAL *db, const REAL *rows, int64_t n, int64_t w)
{
	if (db)
		for (int64_t r = 0; r < n; r++)
			for (int64_t o = 0; o < w; o++)
				db[o] += rows[r * w + o];
}

/* A column-parallel linear's backward (QKV, fc1, the output layer): the weight and bias
 * gradients (gw, gb: NULL when the W pass takes them) from the input rows x, gathered
 * with SP (not when the W pass gathers its own), and the input gradient into din, its
 * partial sums reduced over the group through part. 0 or -1. */
static int SFX(col_back)(const struct SFX(dims) *d, const struct mt_tp *tp, int split, REAL *full, REAL *part,
			 REAL *din, REAL *gw, REAL *gb, const REAL *dout, const REAL *x, const REAL *w, int64_t n_in,
			 int64_t n_out)
{
	const REAL *in;
	int bad = 0;

	if (d->t <= 1) {
		SFX(linear_back)(din, 0, gw, gb, dout, x, w, d->N, n_in, n_out);
		return 0;
	}
	in = split ? NULL : SFX(tp_gather)(d, tp, full, x, n_in, &bad);
	if (bad)
		return -1;
	SFX(linear_back)(part, 0, gw, gb, dout, in, w, d->N, n_in, n_out);
	return SFX(tp_reduce)(d, tp, din, part, n_in);
}

/* A row-parallel linear's backward (fc2, the attention's projection): the output
 * gradient dout whole (this rank's rows gathered with SP), the weight gradient from it
 * (gw NULL: the W pass's, which gets dout whole in save), the input gradient into din;
 * the bias from this rank's rows with tensor parallelism (gb_tp), else with the weight
 * (gb). 0 or -1. */
static int SFX(row_back)(const struct SFX(dims) *d, const struct mt_tp *tp, REAL *full, REAL *din, REAL *gw,
			 REAL *gb, REAL *gb_tp, const REAL *dout, const REAL *x, const REAL *w, int64_t n_in,
			 int64_t n_out, REAL *save)
{
	const REAL *dfull = dout;
	int bad = 0, tpon = d->t > 1;

	if (tpon && (dfull = SFX(tp_gather)(d, tp, full, dout, n_out, &bad), bad))
		return -1;
	SFX(linear_back)(din, 0, gw, tpon ? NULL : gb, dfull, x, w, d->N, n_in, n_out);
	if (save)
		memcpy(save, dfull, (size_t)(d->N * n_out) * sizeof(REAL));
	if (tpon)
		SFX(bias_back)(gb_tp, dout, d->Nr, n_out);
	return 0;
}

/* the output gradients a split backward pass keeps for its W pass, layer k of the stage */
#define S_(a, i, k, w) (V_(a, i) + (k) * d.N * (w))

void SFX(mt_gpt_stage_backward)(const struct mt_config *c, const struct mt_params *t, const REAL *w,
				const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, const REAL *dout,
				REAL *din, REAL *g, int split)
{
	const struct mt_tp *tp = a->tp;
	const struct mt_gpt_stage *st = &a->st;
	struct SFX(dims) d = SFX(dims_of)(c, tp, a->B, a->T);
	int rms = c->normalization == MT_NORM_RMSNORM, tpon = d.t > 1, bad = 0;
	int untied = c->untie_embeddings_and_output_weights;
	const REAL *wte = SFX(param)(t, w, -1, MT_P_WORD_EMB);
	const REAL *wout = untied ? SFX(param)(t, w, -1, MT_P_OUTPUT) : wte;
	REAL *gwte = SFX(grad)(t, g, -1, MT_P_WORD_EMB), *gwpe = SFX(grad)(t, g, -1, MT_P_POS_EMB);
	REAL *gwout = untied ? SFX(grad)(t, g, -1, MT_P_OUTPUT) : gwte;
	REAL *probs = V_(a, A_LOGITS), *full = tpon ? V_(a, A_FULL) : NULL, *part = tpon ? V_(a, A_PART) : NULL;
	REAL *keep = NULL;
	int64_t count = 0, Nr = d.Nr, l0 = st->l0, nl = st->l1 - st->l0;
	int64_t big = d.N * (d.h > d.qkv ? (d.h > d.fc1 ? d.h : d.fc1) : (d.qkv > d.fc1 ? d.qkv : d.fc1));
	REAL *dx = calloc((size_t)(d.N * d.h), sizeof(REAL)), *dmid = calloc((size_t)(d.N * d.h), sizeof(REAL));
	REAL *dbuf = calloc((size_t)big, sizeof(REAL)), *dbuf2 = calloc((size_t)(d.N * (d.q > d.f ? d.q : d.f)), sizeof(REAL));
	REAL *dln = calloc((size_t)(d.N * d.h), sizeof(REAL));
	double sm = a->label_smoothing > 0 ? a->label_smoothing * (double)d.Vg / (double)(d.Vg - 1) : 0;

	/* a split pass leaves the linear layers' weights (and their biases outside tensor
	 * parallelism, where linear_back sums them) to the W pass */
#define GW(li, k) (split ? NULL : SFX(grad)(t, g, li, k))
	split = split && a->split_backward;
	if (!dx || !dmid || !dbuf || !dbuf2 || !dln || (tpon && SFX(tp_grad_begin)(t, g, &keep)))
		goto fail;
	if (!st->last) {
		/* the gradient of the stage's output, as the next stage sent it */
		memcpy(dx, dout, (size_t)(Nr * d.h) * sizeof(REAL));
		goto layers;
	}
	for (int64_t n = 0; n < d.N; n++)
		count += targets[n] >= 0;
	/* dlogits = (p - onehot) / count, in place; masked rows 0; with label smoothing
	 * p - (1 - s) onehot - s / K; the onehot only on the rank holding the target */
	#pragma omp parallel for
	for (int64_t n = 0; n < d.N; n++) {
		REAL *z = probs + n * d.V;
		int64_t y = (int64_t)targets[n] - d.v0;
		if (targets[n] < 0) {
			memset(z, 0, (size_t)d.V * sizeof(REAL));
			continue;
		}
		if (sm > 0) {
			REAL u = (REAL)(sm / (double)d.Vg);
			for (int64_t v = 0; v < d.V; v++)
				z[v] -= u;
			if (y >= 0 && y < d.V)
				z[y] -= (REAL)(1 - sm);
		} else if (y >= 0 && y < d.V) {
			z[y] -= 1;
		}
		for (int64_t v = 0; v < d.V; v++)
			z[v] /= (REAL)count;
	}
	if (SFX(col_back)(&d, tp, split, full, part, dln, split ? NULL : gwout, NULL, probs, V_(a, A_LNF), wout, d.h, d.V))
		goto fail;
	SFX(norm_back)(dx, SFX(grad)(t, g, -1, MT_P_FINAL_W), SFX(grad)(t, g, -1, MT_P_FINAL_B), dln,
		       V_(a, A_RESID) + nl * Nr * d.h, V_(a, A_LNFS), SFX(param)(t, w, -1, MT_P_FINAL_W), Nr, d.h, rms);
layers:
	for (int64_t l = l0 + nl - 1; l >= l0; l--) {
		int li = (int)l;
		int64_t sl = l - l0;
		REAL *xin = V_(a, A_RESID) + sl * Nr * d.h;
		REAL *ln1 = V_(a, A_LN1) + sl * Nr * d.h, *ln1s = V_(a, A_LN1S) + sl * Nr * 2;
		REAL *qkv = V_(a, A_QKV) + sl * d.N * d.qkv, *att = V_(a, A_ATT) + sl * d.B * d.np * d.T * d.T;
		REAL *atty = V_(a, A_ATTY) + sl * d.N * d.q, *mid = V_(a, A_MID) + sl * Nr * d.h;
		REAL *ln2 = V_(a, A_LN2) + sl * Nr * d.h, *ln2s = V_(a, A_LN2S) + sl * Nr * 2;
		REAL *fc1 = V_(a, A_FC1) + sl * d.N * d.fc1, *act = V_(a, A_ACT) + sl * d.N * d.f;

		/* MLP branch: dx flows to mid directly and through fc2, act, fc1, norm2 */
		memcpy(dmid, dx, (size_t)(Nr * d.h) * sizeof(REAL));
		/* row-parallel fc2 (its bias with tensor parallelism from this rank's rows,
		 * summed over the group with SP) */
		if (SFX(row_back)(&d, tp, full, dbuf2, GW(li, MT_P_FC2_W), GW(li, MT_P_FC2_B), SFX(grad)(t, g, li, MT_P_FC2_B),
				  dx, act, SFX(param)(t, w, li, MT_P_FC2_W), d.f, d.h, split ? S_(a, A_SFC2, sl, d.h) : NULL))
			goto fail;
		SFX(activation_back)(dbuf, dbuf2, fc1, &d, c->swiglu);
		if (split)
			memcpy(S_(a, A_SFC1, sl, d.fc1), dbuf, (size_t)(d.N * d.fc1) * sizeof(REAL));
		if (SFX(col_back)(&d, tp, split, full, part, dln, GW(li, MT_P_FC1_W), GW(li, MT_P_FC1_B), dbuf, ln2,
				  SFX(param)(t, w, li, MT_P_FC1_W), d.h, d.fc1))
			goto fail;
		SFX(norm_back)(dmid, SFX(grad)(t, g, li, MT_P_LN2_W), SFX(grad)(t, g, li, MT_P_LN2_B), dln, mid, ln2s,
			       SFX(param)(t, w, li, MT_P_LN2_W), Nr, d.h, rms);
		/* attention branch: dmid flows to xin directly and through proj, attention, qkv, norm1 */
		memcpy(dx, dmid, (size_t)(Nr * d.h) * sizeof(REAL));
		if (SFX(row_back)(&d, tp, full, dbuf2, GW(li, MT_P_PROJ_W), GW(li, MT_P_PROJ_B), SFX(grad)(t, g, li, MT_P_PROJ_B),
				  dmid, atty, SFX(param)(t, w, li, MT_P_PROJ_W), d.q, d.h, split ? S_(a, A_SPROJ, sl, d.h) : NULL))
			goto fail;
		memset(dbuf, 0, (size_t)(d.N * d.qkv) * sizeof(REAL));
		SFX(attention_back)(dbuf, dbuf2, att, qkv, &d);
		if (c->position_embedding_type == MT_POS_ROPE)
			SFX(rope)(dbuf, &d, c->rotary_base, 1); /* a rotation's transpose is its inverse */
		if (split)
			memcpy(S_(a, A_SQKV, sl, d.qkv), dbuf, (size_t)(d.N * d.qkv) * sizeof(REAL));
		if (SFX(col_back)(&d, tp, split, full, part, dln, GW(li, MT_P_QKV_W), GW(li, MT_P_QKV_B), dbuf, ln1,
				  SFX(param)(t, w, li, MT_P_QKV_W), d.h, d.qkv))
			goto fail;
		SFX(norm_back)(dx, SFX(grad)(t, g, li, MT_P_LN1_W), SFX(grad)(t, g, li, MT_P_LN1_B), dln, xin, ln1s,
			       SFX(param)(t, w, li, MT_P_LN1_W), Nr, d.h, rms);
	}
#undef GW
	if (!st->first) {
		/* the gradient of the stage's input, for the stage before */
		memcpy(din, dx, (size_t)(Nr * d.h) * sizeof(REAL));
	} else if (!tpon) {
		for (int64_t n = 0; n < d.N; n++)
			for (int64_t i = 0; i < d.h; i++) {
				gwte[(int64_t)tokens[n] * d.h + i] += dx[n * d.h + i];
				if (gwpe)
					gwpe[(n % d.T) * d.h + i] += dx[n * d.h + i];
			}
	} else {
		/* the position rows from this rank's rows; the word rows of this rank's
		 * vocabulary from every row (gathered with SP) */
		const REAL *dxf;
		if (gwpe)
			for (int64_t n = 0; n < Nr; n++)
				for (int64_t i = 0; i < d.h; i++)
					gwpe[((d.r0 + n) % d.T) * d.h + i] += dx[n * d.h + i];
		dxf = SFX(tp_gather)(&d, tp, full, dx, d.h, &bad);
		if (bad)
			goto fail;
		for (int64_t n = 0; n < d.N; n++) {
			int64_t id = (int64_t)tokens[n] - d.v0;
			if (id >= 0 && id < d.V)
				for (int64_t i = 0; i < d.h; i++)
					gwte[id * d.h + i] += dxf[n * d.h + i];
		}
	}
	if (tpon) {
		if (SFX(tp_grad_end)(t, tp, g, keep))
			goto fail;
		keep = NULL;
	}
	goto done;
fail:
	a->failed = 1;
	free(keep);
done:
	free(dx);
	free(dmid);
	free(dbuf);
	free(dbuf2);
	free(dln);
}

/* dW += dout^T @ in; db += the column sums of dout: the W pass of one linear layer */
static void SFX(linear_wgrad)(REAL *dW, REAL *db, const REAL *dout, const REAL *in, int64_t N, int64_t IN, int64_t O)
{
	GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)O, (int)IN, (int)N, 1, dout, (int)O, in, (int)IN, 1, dW, (int)IN);
	SFX(bias_back)(db, dout, N, O);
}

void SFX(mt_gpt_stage_weight)(const struct mt_config *c, const struct mt_params *t, const REAL *w,
			      struct mt_gpt_acts *a, REAL *g)
{
	const struct mt_tp *tp = a->tp;
	const struct mt_gpt_stage *st = &a->st;
	struct SFX(dims) d = SFX(dims_of)(c, tp, a->B, a->T);
	int tpon = d.t > 1, bad = 0;
	int64_t Nr = d.Nr, l0 = st->l0, nl = st->l1 - st->l0;
	REAL *full = tpon ? V_(a, A_FULL) : NULL;
	REAL *gwout = c->untie_embeddings_and_output_weights ? SFX(grad)(t, g, -1, MT_P_OUTPUT)
							     : SFX(grad)(t, g, -1, MT_P_WORD_EMB);
	const REAL *in;

	(void)w;
	if (!a->split_backward)
		return;
	/* the inputs of the column-parallel layers are gathered here, as the full backward
	 * pass gathers them (every rank of the group runs its W passes in the same order) */
	if (st->last) {
		in = tpon ? SFX(tp_gather)(&d, tp, full, V_(a, A_LNF), d.h, &bad) : V_(a, A_LNF);
		if (bad)
			goto fail;
		SFX(linear_wgrad)(gwout, NULL, V_(a, A_LOGITS), in, d.N, d.h, d.V);
	}
	for (int64_t l = l0 + nl - 1; l >= l0; l--) {
		int li = (int)l;
		int64_t sl = l - l0;
		REAL *ln1 = V_(a, A_LN1) + sl * Nr * d.h, *ln2 = V_(a, A_LN2) + sl * Nr * d.h;
		REAL *atty = V_(a, A_ATTY) + sl * d.N * d.q, *act = V_(a, A_ACT) + sl * d.N * d.f;

		/* the row-parallel biases are the B pass's under tensor parallelism */
		SFX(linear_wgrad)(SFX(grad)(t, g, li, MT_P_FC2_W), tpon ? NULL : SFX(grad)(t, g, li, MT_P_FC2_B),
				  S_(a, A_SFC2, sl, d.h), act, d.N, d.f, d.h);
		in = tpon ? SFX(tp_gather)(&d, tp, full, ln2, d.h, &bad) : ln2;
		if (bad)
			goto fail;
		SFX(linear_wgrad)(SFX(grad)(t, g, li, MT_P_FC1_W), SFX(grad)(t, g, li, MT_P_FC1_B),
				  S_(a, A_SFC1, sl, d.fc1), in, d.N, d.h, d.fc1);
		SFX(linear_wgrad)(SFX(grad)(t, g, li, MT_P_PROJ_W), tpon ? NULL : SFX(grad)(t, g, li, MT_P_PROJ_B),
				  S_(a, A_SPROJ, sl, d.h), atty, d.N, d.q, d.h);
		in = tpon ? SFX(tp_gather)(&d, tp, full, ln1, d.h, &bad) : ln1;
		if (bad)
			goto fail;
		SFX(linear_wgrad)(SFX(grad)(t, g, li, MT_P_QKV_W), SFX(grad)(t, g, li, MT_P_QKV_B),
				  S_(a, A_SQKV, sl, d.qkv), in, d.N, d.h, d.qkv);
	}
	return;
fail:
	a->failed = 1;
}

#undef S_

void SFX(mt_gpt_backward)(const struct mt_config *c, const struct mt_params *t, const REAL *w,
			  const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, REAL *g)
{
	SFX(mt_gpt_stage_backward)(c, t, w, tokens, targets, a, NULL, NULL, g, 0);
}

#undef V_
