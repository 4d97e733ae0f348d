/* dist-check: run under mpiexec -n N; every collective of dist.h on small buffers whose
 * results are known, one TAP line per check from rank 0 (a failing check on another rank
 * makes rank 0 report it too: the counts of failures are summed).
 *
 *   dist-check                   the collectives over the world
 *   dist-check grid TP PP        the process grid: rank 0 prints, for every rank, the world
 *                                ranks of its groups as each group's communicator sees them
 *                                ("rank 5: tp [4,5] dp [5,7] pp [1,5] mp [4,5,6,7] emb [1,5]",
 *                                "emb -" when in none), then TAP lines for the groups against
 *                                mt_dist_group_ranks and for tpcomm.c's operations over the
 *                                tensor- and model-parallel groups, checked bit for bit
 *   dist-check grid TP PP hang R world rank R skips an agreement over its tensor-parallel
 *                                group (timeout 2 s): the others fail naming it, exit 4 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/dist.h"
#include "parallel/tpcomm.h"

static const char *const kinds[MT_GROUP_NKINDS] = { "tp", "dp", "pp", "mp", "emb" };

/* rank q's contribution to element i: its order of summation shows in the result */
static float fval(int q, int64_t i)
{
	static const float base[4] = { 1e8f, 1.0f, -1e8f, 1.0f };
	return base[q % 4] + (float)(i % 7) * 0.25f;
}

static double dval(int q, int64_t i)
{
	static const double base[4] = { 1e17, 1.0, -1e17, 1.0 };
	return base[q % 4] + (double)(i % 5) * 0.125;
}

/* the ordered sum over the group's ranks 0..size-1 of fval(., i), as the contract says */
static float fsum(int size, int64_t i)
{
	float s = fval(0, i);
	for (int q = 1; q < size; q++)
		s += fval(q, i);
	return s;
}

/* every rank of v holds the same n floats in x (compared through an all-gather) */
static int same_everywhere(struct mt_dist *v, const float *x, int64_t n, struct mt_err *e)
{
	int64_t cnt[64], dsp[64];
	float *all = malloc((size_t)(v->world * n + 1) * sizeof(float));
	int bad = 0;

	for (int q = 0; q < v->world; q++)
		cnt[q] = n, dsp[q] = q * n;
	memcpy(all + v->rank * n, x, (size_t)n * sizeof(float));
	if (mt_dist_allgatherv_f32(v, all, cnt, dsp, "check", 0, e))
		bad = -1;
	for (int q = 0; q < v->world && bad >= 0; q++)
		bad += memcmp(all + q * n, x, (size_t)n * sizeof(float)) != 0;
	free(all);
	return bad;
}

/* tpcomm.c's operations over group v: the known results bit for bit, the same bits on
 * every rank, the counters; adds to fails[0..5] */
static int check_tpcomm(struct mt_dist *v, double *fails, struct mt_err *e)
{
	struct mt_tpcomm c;
	struct mt_tp tp;
	int S = v->world, r = v->rank, sb;
	const int64_t sizes[3] = { 10, 3, 12 };
	float in[512], out[512];
	double x[16];

	if (mt_tpcomm_init(&c, v, 0, &tp, e))
		return -1;
	fails[0] += tp.size != S || tp.rank != r || tp.ctx != &c;
	/* all-reduce: n not a multiple of the size, smaller than it, a multiple */
	for (int k = 0; k < 3; k++) {
		int64_t n = sizes[k];
		for (int64_t i = 0; i < n; i++)
			out[i] = fval(r, i);
		mt_tpcomm_reset_counts(&c);
		if (tp.allreduce(tp.ctx, out, n))
			goto fail;
		for (int64_t i = 0; i < n; i++)
			fails[1] += memcmp(&out[i], &(float){ fsum(S, i) }, sizeof(float)) != 0;
		if ((sb = same_everywhere(v, out, n, e)) < 0)
			goto fail;
		fails[1] += sb;
		fails[5] += c.calls[MT_TPC_ALLREDUCE] != 1 || c.elems[MT_TPC_ALLREDUCE] != n;
		if (n % S == 0)
			fails[5] += c.bytes[MT_TPC_ALLREDUCE] != (int64_t)sizeof(float) * 2 * n / S * (S - 1);
	}
	/* all-gather: 5 floats from every rank, rank 0's first */
	for (int i = 0; i < 5; i++)
		in[i] = (float)(100 * r + i);
	mt_tpcomm_reset_counts(&c);
	if (tp.allgather(tp.ctx, out, in, 5))
		goto fail;
	for (int q = 0; q < S; q++)
		for (int i = 0; i < 5; i++)
			fails[2] += out[q * 5 + i] != (float)(100 * q + i);
	fails[5] += c.calls[MT_TPC_ALLGATHER] != 1 || c.bytes[MT_TPC_ALLGATHER] != (int64_t)sizeof(float) * 5 * (S - 1);
	/* reduce-scatter: block q of every rank's input goes, summed in rank order, to rank q */
	for (int64_t i = 0; i < 6 * S; i++)
		in[i] = fval(r, i);
	mt_tpcomm_reset_counts(&c);
	if (tp.reduce_scatter(tp.ctx, out, in, 6))
		goto fail;
	for (int64_t i = 0; i < 6; i++)
		fails[3] += memcmp(&out[i], &(float){ fsum(S, r * 6 + i) }, sizeof(float)) != 0;
	fails[5] += c.calls[MT_TPC_REDUCE_SCATTER] != 1 ||
		    c.bytes[MT_TPC_REDUCE_SCATTER] != (int64_t)sizeof(float) * 6 * (S - 1);
	/* doubles: the sum in rank order, the maximum, a NaN on one rank is the maximum */
	for (int i = 0; i < 4; i++)
		x[i] = dval(r, i);
	mt_tpcomm_reset_counts(&c);
	if (tp.allreduce_f64(tp.ctx, x, 4, 0))
		goto fail;
	for (int i = 0; i < 4; i++) {
		double want = dval(0, i);
		for (int q = 1; q < S; q++)
			want += dval(q, i);
		fails[4] += memcmp(&x[i], &want, sizeof(double)) != 0;
	}
	x[0] = r;
	x[1] = -r;
	x[2] = r == S - 1 ? NAN : r;
	if (tp.allreduce_f64(tp.ctx, x, 3, 1))
		goto fail;
	fails[4] += x[0] != S - 1 || x[1] != 0 || !isnan(x[2]);
	fails[5] += c.calls[MT_TPC_F64] != 2 || c.bytes[MT_TPC_F64] != (int64_t)sizeof(double) * 7 * (S - 1);
	/* after a failure every operation fails at once, communicating nothing */
	c.failed = 1;
	fails[0] += tp.allreduce(tp.ctx, out, 4) != -1 || c.calls[MT_TPC_ALLREDUCE] != 0;
	mt_tpcomm_free(&c);
	return 0;
fail:
	*e = c.err;
	mt_tpcomm_free(&c);
	return -1;
}

static int grid(int argc, char **argv)
{
	struct mt_dist d;
	struct mt_err e = { 0 };
	int tp = atoi(argv[2]), pp = atoi(argv[3]), hang = argc > 5 ? atoi(argv[5]) : -1;
	int W, R, n = 0, ranks[64];
	double fails[16] = { 0 };
	float *rec, *all = NULL;
	int64_t cnt[64], dsp[64];
	const char *names[] = { "each group's communicator holds mt_dist_group_ranks's world ranks",
				"each group's rank and world follow the world ranks",
				"an agreement and a barrier over each group",
				"tensor-parallel group: init, and no operation after a failure",
				"tensor-parallel all-reduce in rank order, the same bits on every rank",
				"tensor-parallel all-gather",
				"tensor-parallel reduce-scatter in rank order",
				"tensor-parallel all-reduce of doubles: sum in rank order, maximum, NaN",
				"tensor-parallel bytes and calls counted",
				"model-parallel group: init, and no operation after a failure",
				"model-parallel all-reduce in rank order, the same bits on every rank",
				"model-parallel all-gather",
				"model-parallel reduce-scatter in rank order",
				"model-parallel all-reduce of doubles: sum in rank order, maximum, NaN",
				"model-parallel bytes and calls counted" };

	if (mt_dist_init(&d, &e) || mt_dist_layout(&d, tp, pp, &e)) {
		fprintf(stderr, "dist-check: %s\n", e.msg);
		return 4;
	}
	d.timeout = hang >= 0 ? 2 : 20;
	W = d.world, R = d.rank;
	if (W > 64)
		return 2;
	if (hang >= 0) {
		int flag;
		struct mt_dist *v = mt_dist_group(&d, MT_GROUP_TP);
		if (R == hang)
			sleep(6);
		else if (mt_dist_agree(v, 7, 0, &flag, &e))
			goto fail;
		/* the ranks of other groups wait here for the abort */
		d.timeout = 30;
		if (mt_dist_barrier(&d, "the end", 8, &e))
			goto fail;
		mt_dist_finalize(&d);
		return 0;
	}
	/* this rank's record: for each kind, the world ranks its communicator gathers (-1 pads) */
	rec = malloc((size_t)MT_GROUP_NKINDS * W * sizeof(float));
	all = malloc((size_t)MT_GROUP_NKINDS * W * W * sizeof(float));
	for (int i = 0; i < MT_GROUP_NKINDS * W; i++)
		rec[i] = -1;
	for (int g = 0; g < MT_GROUP_NKINDS; g++) {
		struct mt_dist *v = mt_dist_group(&d, (enum mt_group)g);
		int k = mt_dist_group_ranks(W, tp, pp, (enum mt_group)g, R, ranks), flag;
		float *x = rec + g * W;

		if (!v) {
			fails[0] += k != 0;
			continue;
		}
		fails[1] += v->world != k || v->dp != v->world || v->dp_rank != v->rank || v->tp != 1 || v->pp != 1 ||
			    strcmp(v->where, d.where) != 0 || v->timeout != d.timeout;
		for (int q = 0; q < v->world; q++)
			cnt[q] = 1, dsp[q] = q;
		x[v->rank] = (float)R;
		if (mt_dist_allgatherv_f32(v, x, cnt, dsp, "check", 0, &e))
			goto fail;
		for (int q = 0; q < v->world; q++)
			fails[0] += q >= k || x[q] != (float)ranks[q];
		fails[1] += v->rank >= k || ranks[v->rank] != R;
		/* the highest world rank of the group wins */
		if (mt_dist_agree(v, 3, R, &flag, &e) || mt_dist_barrier(v, "check", 3, &e))
			goto fail;
		fails[2] += flag != ranks[k - 1];
	}
	for (int q = 0; q < W; q++)
		cnt[q] = MT_GROUP_NKINDS * W, dsp[q] = (int64_t)q * MT_GROUP_NKINDS * W;
	memcpy(all + R * MT_GROUP_NKINDS * W, rec, (size_t)MT_GROUP_NKINDS * W * sizeof(float));
	if (mt_dist_gatherv_f32(&d, all, cnt, dsp, "check", 0, &e))
		goto fail;
	if (check_tpcomm(mt_dist_group(&d, MT_GROUP_TP), fails + 3, &e) ||
	    check_tpcomm(mt_dist_group(&d, MT_GROUP_MP), fails + 9, &e))
		goto fail;
	if (mt_dist_allreduce_f64(&d, fails, 16, 0, "check", 0, &e))
		goto fail;
	if (R == 0) {
		for (int q = 0; q < W; q++) {
			printf("rank %d:", q);
			for (int g = 0; g < MT_GROUP_NKINDS; g++) {
				const float *x = all + (q * MT_GROUP_NKINDS + g) * W;
				printf(" %s ", kinds[g]);
				if (x[0] < 0)
					printf("-");
				for (int i = 0; i < W && x[i] >= 0; i++)
					printf("%s%d", i ? "," : "[", (int)x[i]);
				if (x[0] >= 0)
					printf("]");
			}
			printf("\n");
		}
		for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
			printf("%s %d - %s on %d ranks, tp %d, pp %d\n", fails[i] ? "not ok" : "ok", ++n, names[i], W, tp, pp);
		printf("1..%d\n", n);
	}
	free(rec), free(all);
	mt_dist_finalize(&d);
	return 0;
fail:
	fprintf(stderr, "dist-check: %s\n", e.msg);
	mt_dist_abort(&d, 4);
	return 4;
}

int main(int argc, char **argv)
{
	struct mt_dist d;
	struct mt_err e = { 0 };
	int64_t cnt[64], dsp[64];
	float f[256], g[256];
	double x[64], fails[8] = { 0 };
	int W, R, n = 0, flag;
	const char *names[8] = { "allgatherv", "alltoallv in rank order", "allreduce sum", "reduce-scatter",
				 "gatherv to rank 0", "allreduce max", "bcast", "agree on the maximum flag" };

	if (argc >= 4 && !strcmp(argv[1], "grid"))
		return grid(argc, argv);
	if (mt_dist_init(&d, &e) || mt_dist_layout(&d, 1, 1, &e)) {
		fprintf(stderr, "dist-check: %s\n", e.msg);
		return 4;
	}
	d.timeout = 20;
	W = d.world, R = d.rank;
	if (W > 64)
		return 2;
	/* rank q owns q + 1 elements */
	for (int q = 0, o = 0; q < W; q++) {
		cnt[q] = q + 1;
		dsp[q] = o;
		o += q + 1;
	}
	for (int i = 0; i < 256; i++)
		f[i] = -1;
	for (int i = 0; i < cnt[R]; i++)
		f[dsp[R] + i] = (float)(100 * R + i);
	if (mt_dist_allgatherv_f32(&d, f, cnt, dsp, "check", 0, &e))
		goto fail;
	for (int q = 0; q < W; q++)
		for (int i = 0; i < cnt[q]; i++)
			fails[0] += f[dsp[q] + i] != (float)(100 * q + i);
	/* alltoallv: rank r sends rank q the value 1000 r + q; q receives them in rank order */
	for (int q = 0; q < W; q++) {
		cnt[q] = 1;
		dsp[q] = q;
		f[q] = (float)(1000 * R + q);
	}
	if (mt_dist_alltoallv_f32(&d, f, cnt, dsp, g, 1, "check", 0, &e))
		goto fail;
	for (int q = 0; q < W; q++)
		fails[1] += g[q] != (float)(1000 * q + R);
	for (int i = 0; i < 10; i++)
		f[i] = (float)(R + i);
	if (mt_dist_allreduce_f32(&d, f, 10, "check", 0, &e))
		goto fail;
	for (int i = 0; i < 10; i++)
		fails[2] += f[i] != (float)(W * (W - 1) / 2 + W * i);
	for (int q = 0; q < W; q++)
		cnt[q] = 2;
	for (int i = 0; i < 2 * W; i++)
		f[i] = (float)i;
	if (mt_dist_reduce_scatter_f32(&d, f, cnt, g, "check", 0, &e))
		goto fail;
	fails[3] += g[0] != (float)(W * 2 * R) || g[1] != (float)(W * (2 * R + 1));
	for (int q = 0, o = 0; q < W; q++) {
		cnt[q] = q + 1;
		dsp[q] = o;
		o += q + 1;
	}
	for (int i = 0; i < cnt[R]; i++)
		f[dsp[R] + i] = (float)(7 * R);
	if (mt_dist_gatherv_f32(&d, f, cnt, dsp, "check", 0, &e))
		goto fail;
	if (R == 0)
		for (int q = 0; q < W; q++)
			for (int i = 0; i < cnt[q]; i++)
				fails[4] += f[dsp[q] + i] != (float)(7 * q);
	x[0] = R;
	if (mt_dist_allreduce_f64(&d, x, 1, 1, "check", 0, &e))
		goto fail;
	fails[5] += x[0] != W - 1;
	{
		char msg[16] = "";
		if (R == W - 1)
			strcpy(msg, "hello");
		if (mt_dist_bcast(&d, msg, sizeof(msg), W - 1, "check", &e))
			goto fail;
		fails[6] += strcmp(msg, "hello") != 0;
	}
	if (mt_dist_agree(&d, 5, R == 1 ? 3 : 0, &flag, &e))
		goto fail;
	fails[7] += flag != (W > 1 ? 3 : 0);
	if (mt_dist_allreduce_f64(&d, fails, 8, 0, "check", 0, &e))
		goto fail;
	if (R == 0) {
		for (int i = 0; i < 8; i++)
			printf("%s %d - %s on %d ranks\n", fails[i] ? "not ok" : "ok", ++n, names[i], W);
		printf("1..%d\n", n);
	}
	mt_dist_finalize(&d);
	return 0;
fail:
	fprintf(stderr, "dist-check: %s\n", e.msg);
	mt_dist_abort(&d, 4);
	return 4;
}
