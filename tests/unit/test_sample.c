/* Unit tests for lib/infer/sample.c: greedy, Megatron's top-k (ties kept) and top-p (the
 * token that crosses the mass stays) on hand-made distributions, the draw's
 * frequencies on a grid of uniform numbers, padded ids never chosen, the ranges, and
 * the counter-based uniform numbers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/sample.h"
#include "tap.h"

#define GRID 10000

/* how often each id is drawn over u = (i + 0.5) / GRID */
static void freq(struct mt_sampler *s, const float *z, const struct mt_sample_params *p, double *f)
{
	memset(f, 0, (size_t)s->vocab * sizeof(double));
	for (int i = 0; i < GRID; i++)
		f[mt_sample(s, z, p, (i + 0.5) / GRID)] += 1.0 / GRID;
}

int main(void)
{
	struct mt_sampler s;
	struct mt_err e = { 0 };
	/* probabilities 0.5, 0.3, 0.15, 0.05 as logits, then four padded ids with huge logits */
	float z[8] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f), 100, 100, 100, 100 };
	float tie[4] = { 1, 3, 3, 0 };
	double f[4];
	struct mt_sample_params p;

	if (mt_sampler_init(&s, 4, &e)) {
		ok(0, "init: %s", e.msg);
		return tap_done();
	}
	p = (struct mt_sample_params){ 0, 0, 0 };
	is_int(mt_sample(&s, z, &p, 0.9), 0, "temperature 0 is the argmax of the real vocabulary (padded ids ignored)");
	is_int(mt_sample(&s, tie, &p, 0.9), 1, "argmax ties go to the lowest id");
	p = (struct mt_sample_params){ 1.0, 1, 0 };
	is_int(mt_sample(&s, z, &p, 0.99), 0, "top_k 1 is greedy whatever the temperature");

	p = (struct mt_sample_params){ 1.0, 0, 0 };
	freq(&s, z, &p, f);
	ok(fabs(f[0] - 0.5) < 1e-3 && fabs(f[1] - 0.3) < 1e-3 && fabs(f[2] - 0.15) < 1e-3 && fabs(f[3] - 0.05) < 1e-3,
	   "plain sampling draws each id with its probability (%.4f %.4f %.4f %.4f)", f[0], f[1], f[2], f[3]);
	p.temperature = 0.5; /* p^2 renormalized: 0.25, 0.09, 0.0225, 0.0025 over 0.365 */
	freq(&s, z, &p, f);
	ok(fabs(f[0] - 0.25 / 0.365) < 1e-3 && fabs(f[3] - 0.0025 / 0.365) < 1e-3, "temperature 0.5 squares the probabilities");
	p = (struct mt_sample_params){ 1.0, 2, 0 };
	freq(&s, z, &p, f);
	ok(fabs(f[0] - 0.625) < 1e-3 && fabs(f[1] - 0.375) < 1e-3 && f[2] == 0 && f[3] == 0, "top_k 2 keeps the two most likely");
	p = (struct mt_sample_params){ 1.0, 2, 0 };
	freq(&s, tie, &p, f);
	ok(f[1] > 0 && f[2] > 0 && f[0] == 0 && f[3] == 0, "top_k 2 with a tie at the top: both tied ids");
	p = (struct mt_sample_params){ 1.0, 3, 0 };
	freq(&s, tie, &p, f);
	ok(f[0] > 0 && f[3] == 0, "top_k 3: the third is kept");
	p = (struct mt_sample_params){ 1.0, 4, 0 };
	freq(&s, z, &p, f);
	ok(f[3] > 0.04, "top_k at the vocabulary size keeps everything");
	p = (struct mt_sample_params){ 1.0, 0, 0.49 };
	freq(&s, z, &p, f);
	ok(fabs(f[0] - 1) < 1e-9, "top_p 0.49: only the most likely token (it always stays)");
	p.top_p = 0.51;
	freq(&s, z, &p, f);
	ok(fabs(f[0] - 0.5 / 0.8) < 1e-3 && fabs(f[1] - 0.3 / 0.8) < 1e-3 && f[2] == 0,
	   "top_p 0.51: the token that crosses the mass is kept, the next one not");
	p.top_p = 0.81;
	freq(&s, z, &p, f);
	ok(f[2] > 0 && f[3] == 0, "top_p 0.81: three tokens");
	p.top_p = 1e-12;
	freq(&s, z, &p, f);
	ok(fabs(f[0] - 1) < 1e-9, "a tiny top_p is greedy");
	{
		double g[4];
		p.top_p = 1.0;
		freq(&s, z, &p, f);
		p.top_p = 0;
		freq(&s, z, &p, g);
		ok(!memcmp(f, g, sizeof(f)), "top_p 1 draws exactly as no top_p");
	}

	{
		/* a large vocabulary: one token of 0.5, one of 0.3 (or not), the rest tiny, so
		 * top-p either cuts among the few large ones or must sort the tiny ones too */
		enum { BIG = 2000 };
		static float zb[BIG];
		static double fb[BIG];
		struct mt_sampler sb;
		int64_t maxid = 0;
		mt_sampler_init(&sb, BIG, &e);
		zb[0] = logf(0.5f);
		zb[1] = logf(0.3f);
		for (int v = 2; v < BIG; v++)
			zb[v] = logf(0.2f / (BIG - 2));
		p = (struct mt_sample_params){ 1.0, 0, 0.6 };
		freq(&sb, zb, &p, fb);
		ok(fabs(fb[0] - 0.625) < 1e-3 && fabs(fb[1] - 0.375) < 1e-3, "top_p 0.6 over 2000 ids: the two large ones only");
		for (int v = 1; v < BIG; v++) /* now 0.5 and 1999 ids of 0.5/1999 = 0.00025 */
			zb[v] = logf(0.5f / (BIG - 1));
		p.top_p = 0.70001;
		freq(&sb, zb, &p, fb);
		for (int v = 0; v < BIG; v++)
			if (fb[v] > 0)
				maxid = v;
		/* kept: id 0 and the tiny ids while the mass before them is <= 0.70001 */
		{
			double tiny = exp((double)zb[1]) / (exp((double)zb[0]) + (BIG - 1) * exp((double)zb[1]));
			int64_t want = (int64_t)floor((0.70001 - (1 - (BIG - 1) * tiny)) / tiny) + 1;
			ok(maxid <= want && maxid > want - 40 && fb[0] > 0.5,
			   "top_p 0.70001 over 2000 ids, the nucleus among equal tiny ones: ids up to %lld (want at most %lld)",
			   (long long)maxid, (long long)want);
		}
		mt_sampler_free(&sb);
	}

	p = (struct mt_sample_params){ 1.0, 5, 0.5 };
	ok(mt_sample_check(&p, &e) == -1 && strstr(e.msg, "together"), "top_k with top_p is refused: %s", e.msg);
	p = (struct mt_sample_params){ 101, 0, 0 };
	ok(mt_sample_check(&p, &e) == -1, "temperature above 100 is refused");
	p = (struct mt_sample_params){ 1, 0, 1.5 };
	ok(mt_sample_check(&p, &e) == -1, "top_p above 1 is refused");
	p = (struct mt_sample_params){ 0, 0, 0 };
	ok(mt_sample_check(&p, &e) == 0, "temperature 0 is accepted (greedy)");

	{
		double u = mt_sample_uniform(1234, 0, 0), lo = 1, hi = 0, mean = 0;
		ok(u == mt_sample_uniform(1234, 0, 0) && u != mt_sample_uniform(1234, 1, 0) && u != mt_sample_uniform(1234, 0, 1) &&
			   u != mt_sample_uniform(1235, 0, 0),
		   "uniform numbers are a function of (seed, index, step)");
		for (int i = 0; i < 100000; i++) {
			double v = mt_sample_uniform(7, (uint64_t)i % 97, (uint64_t)i / 97);
			lo = fmin(lo, v);
			hi = fmax(hi, v);
			mean += v / 100000;
		}
		ok(lo >= 0 && hi < 1 && fabs(mean - 0.5) < 0.005, "uniform numbers in [0,1), mean %.4f", mean);
	}
	{
		double lp = mt_sample_logprob(z, 4, 1);
		ok(fabs(lp - log(0.3)) < 1e-6, "log-probability over the real vocabulary: %.7f", lp);
	}
	mt_sampler_free(&s);
	return tap_done();
}
