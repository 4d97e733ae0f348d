/* dist-check: run under mpiexec -n N; every collective of dist.h on small buffers whose
 * results are known, one TAP line per check from rank 0 (a failing check on another rank
 * makes rank 0 report it too: the counts of failures are summed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

int main(void)
{
	struct mt_dist d;
	struct mt_err e = { 0 };
	int64_t cnt[64], dsp[64];
	float f[256], g[256];
	double x[64], fails[8] = { 0 };
	int W, R, n = 0, flag;
	const char *names[8] = { "allgatherv", "alltoallv in rank order", "allreduce sum", "reduce-scatter",
				 "gatherv to rank 0", "allreduce max", "bcast", "agree on the maximum flag" };

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
	fprintf(stderr, "dist-check: rank %d: %s\n", R, e.msg);
	mt_dist_abort(&d, 4);
	return 4;
}
