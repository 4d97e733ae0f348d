/* test_ppsched: the pipeline schedules' action lists against the spec's formulas.
 *
 * For p = 4 and m = 8 it prints each stage's sequence of forward, backward and weight
 * passes (1F1B, interleaved with v = 2, ZB-H1) and compares it with the sequence the
 * formulas give, built here independently (1F1B's w = min(p - r - 1, m); the interleaved
 * table and warm-up (p - r - 1) 2 + (v - 1) G; ZB-H1's W deferred by r). Then every
 * stage's list runs in a simulated pipeline (blocking receives, buffered sends, unit
 * pass times): no deadlock, every pass once in a valid order, the simulated bubble equal
 * to the papers' formulas, the micro-batches in flight as counted (1F1B min(p - r, m);
 * ZB-H1 at most p), over a sweep of p, v and m; and the counts Megatron refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/ppsched.h"
#include "tap.h"

#define MAXP 8

/* the formulas, written out: 1F1B and ZB-H1 on stage r */
static void expect_1f1b(char *buf, size_t n, int p, int m, int r, int zb)
{
	int w = p - r - 1 < m ? p - r - 1 : m, o = 0, nw = 0;

	buf[0] = 0;
	for (int i = 0; i < w; i++)
		o += snprintf(buf + o, n - o, "%sF%d", o ? " " : "", i);
	for (int i = 0; i < m; i++) {
		if (i + w < m)
			o += snprintf(buf + o, n - o, "%sF%d", o ? " " : "", i + w);
		o += snprintf(buf + o, n - o, "%sB%d", o ? " " : "", i);
		if (zb && i >= r)
			o += snprintf(buf + o, n - o, " W%d", nw++);
	}
	while (zb && nw < m)
		o += snprintf(buf + o, n - o, " W%d", nw++);
}

/* the interleaved order: Megatron's table (groups of G; in a group chunk by chunk), warm-up
 * (p - r - 1) 2 + (v - 1) G capped at m v, then one forward and one backward (the chunk
 * reversed), then the cool-down */
static void expect_interleaved(char *buf, size_t n, int p, int v, int m, int G, int r)
{
	int tab[256][2], N = 0, o = 0, w = (p - r - 1) * 2 + (v - 1) * G;

	for (int g0 = 0; g0 < m; g0 += G) {
		int end = g0 + G >= m ? m : g0 + G;
		for (int c = 0; c < v; c++)
			for (int mb = g0; mb < end; mb++) {
				tab[N][0] = mb;
				tab[N][1] = c;
				N++;
			}
	}
	if (w > N)
		w = N;
#define F(k) o += snprintf(buf + o, n - o, tab[k][1] ? "%sF%d.%d" : "%sF%d", o ? " " : "", tab[k][0], tab[k][1])
#define B(k) o += snprintf(buf + o, n - o, v - 1 - tab[k][1] ? "%sB%d.%d" : "%sB%d", o ? " " : "", tab[k][0], v - 1 - tab[k][1])
	buf[0] = 0;
	for (int k = 0; k < N; k++) {
		F(k);
		if (k >= w)
			B(k - w);
	}
	for (int k = N - w; k < N; k++)
		B(k);
#undef F
#undef B
}

/* A simulated step: each stage runs its list in order; a forward or backward waits for
 * its input's arrival (the producer's finish), sends are buffered. Pass times: forward 1,
 * whole backward 2, B 1, W 1 (per chunk: divided by v). Returns the bubble over the
 * busiest stage's compute, -1 on a deadlock or a malformed list. */
static double simulate(struct mt_pp_sched *s, int p, int *peak_ok, char *why, size_t wn)
{
	int v = s[0].v, m = s[0].m, pos[MAXP] = { 0 }, done = 0;
	double t[MAXP] = { 0 }, busy[MAXP] = { 0 }, end = 0, worst = 0;
	/* when the activations / gradient of virtual stage k, micro-batch mb became available */
	double *fa = malloc(sizeof(double) * (size_t)(p * v * m)), *ba = malloc(sizeof(double) * (size_t)(p * v * m));
	int *fdone = calloc((size_t)(p * v * m), sizeof(int)), *bdone = calloc((size_t)(p * v * m), sizeof(int));
	int *wdone = calloc((size_t)(p * v * m), sizeof(int));
	double cost[4] = { 1.0 / v, 2.0 / v, 1.0 / v, 1.0 / v };

	for (int i = 0; i < p * v * m; i++)
		fa[i] = ba[i] = -1;
	*peak_ok = 1;
	while (!done) {
		int progress = 0;
		done = 1;
		for (int r = 0; r < p; r++) {
			while (pos[r] < s[r].n) {
				const struct mt_pp_action *x = &s[r].a[pos[r]];
				int vs = x->chunk * p + r, id = vs * m + x->mb;
				double start = t[r];
				if (x->op > MT_PP_BWD_WEIGHT) {
					pos[r]++;
					continue; /* transfers take no time here */
				}
				if (x->op == MT_PP_FWD && vs > 0) {
					if (fa[(vs - 1) * m + x->mb] < 0)
						break;
					start = fmax(start, fa[(vs - 1) * m + x->mb]);
				}
				if ((x->op == MT_PP_BWD || x->op == MT_PP_BWD_INPUT) && vs < p * v - 1) {
					if (ba[(vs + 1) * m + x->mb] < 0)
						break;
					start = fmax(start, ba[(vs + 1) * m + x->mb]);
				}
				if ((x->op == MT_PP_FWD && fdone[id]) || (x->op != MT_PP_FWD && !fdone[id]) ||
				    (x->op == MT_PP_BWD_WEIGHT && bdone[id] != 2) ||
				    ((x->op == MT_PP_BWD || x->op == MT_PP_BWD_INPUT) && bdone[id])) {
					snprintf(why, wn, "stage %d: action %d out of order", r, pos[r]);
					goto bad;
				}
				t[r] = start + cost[x->op];
				busy[r] += cost[x->op];
				if (x->op == MT_PP_FWD) {
					fdone[id] = 1;
					fa[id] = t[r];
				} else if (x->op == MT_PP_BWD_WEIGHT) {
					wdone[id] = 1;
				} else {
					bdone[id] = x->op == MT_PP_BWD ? 1 : 2;
					ba[id] = t[r];
				}
				pos[r]++;
				progress = 1;
			}
			if (pos[r] < s[r].n)
				done = 0;
		}
		if (!done && !progress) {
			snprintf(why, wn, "deadlock");
			goto bad;
		}
	}
	for (int i = 0; i < p * v * m; i++)
		if (!fdone[i] || !bdone[i] || (bdone[i] == 2 && !wdone[i])) {
			snprintf(why, wn, "virtual stage %d micro-batch %d not run whole", i / m, i % m);
			goto bad;
		}
	for (int r = 0; r < p; r++)
		end = fmax(end, t[r]);
	for (int r = 0; r < p; r++)
		worst = fmax(worst, (end - busy[r]) / busy[r]);
	/* the memory rule: 1F1B and interleaved as counted; ZB-H1 never above p */
	for (int r = 0; r < p; r++) {
		int want = s[r].kind == MT_PP_ZBH1 ? p : s[r].kind == MT_PP_1F1B ? (p - r < m ? p - r : m) : 0;
		if (want && (s[r].kind == MT_PP_ZBH1 ? s[r].inflight[0] > want : s[r].inflight[0] != want))
			*peak_ok = 0;
	}
	free(fa), free(ba), free(fdone), free(bdone), free(wdone);
	return worst;
bad:
	free(fa), free(ba), free(fdone), free(bdone), free(wdone);
	return -1;
}

static int make_all(struct mt_pp_sched *s, enum mt_pp_kind k, int p, int v, int m, int G)
{
	struct mt_err e = { 0 };

	for (int r = 0; r < p; r++)
		if (mt_pp_sched_make(&s[r], k, p, v, m, r, G, 0, &e)) {
			printf("# %s\n", e.msg);
			return -1;
		}
	return 0;
}

static void free_all(struct mt_pp_sched *s, int p)
{
	for (int r = 0; r < p; r++)
		mt_pp_sched_free(&s[r]);
}

/* p = 4, m = 8: the printed sequences against the formulas */
static void sequences(enum mt_pp_kind k, int v)
{
	struct mt_pp_sched s[4];
	char got[4096], want[4096], why[128];
	int same = 1, peak;
	double bubble;

	if (make_all(s, k, 4, v, 8, 0)) {
		ok(0, "%s: the lists", mt_pp_kind_name(k));
		return;
	}
	printf("# %s, p = 4, m = 8%s:\n", mt_pp_kind_name(k), v > 1 ? ", v = 2 (F3.1: micro-batch 3, chunk 1)" : "");
	for (int r = 0; r < 4; r++) {
		mt_pp_sched_format(&s[r], got, sizeof(got));
		if (k == MT_PP_INTERLEAVED)
			expect_interleaved(want, sizeof(want), 4, v, 8, 4, r);
		else
			expect_1f1b(want, sizeof(want), 4, 8, r, k == MT_PP_ZBH1);
		printf("#   stage %d (warm-up %d, in flight %d): %s\n", r, s[r].warmup, s[r].inflight[0], got);
		if (strcmp(got, want)) {
			printf("#   the formula gives:    %s\n", want);
			same = 0;
		}
	}
	ok(same, "%s: p = 4, m = 8%s: every stage's sequence is the formula's", mt_pp_kind_name(k), v > 1 ? ", v = 2" : "");
	bubble = simulate(s, 4, &peak, why, sizeof(why));
	ok(bubble >= 0 && fabs(bubble - mt_pp_bubble(k, 4, v, 8, 1, 1, 1)) < 1e-9 && peak,
	   "%s: simulated bubble %.4f, the formula's %.4f; in flight as counted: %d", mt_pp_kind_name(k), bubble,
	   mt_pp_bubble(k, 4, v, 8, 1, 1, 1), peak);
	free_all(s, 4);
}

int main(void)
{
	struct mt_pp_sched s[MAXP];
	struct mt_err e = { 0 };
	char why[128] = "";
	/* the first interleaved stage, written out by hand from the spec (p 4, v 2, m 8, G 4) */
	const char *rank0 = "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 F4 F5 F6 B0.1 F7 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0 F7.1 B1 "
			    "B2 B3 B4.1 B5.1 B6.1 B7.1 B4 B5 B6 B7";
	char got[4096];
	int runs = 0, fails = 0, peaks = 1;

	sequences(MT_PP_1F1B, 1);
	sequences(MT_PP_INTERLEAVED, 2);
	sequences(MT_PP_ZBH1, 1);
	mt_pp_sched_make(&s[0], MT_PP_INTERLEAVED, 4, 2, 8, 0, 0, 0, &e);
	mt_pp_sched_format(&s[0], got, sizeof(got));
	ok(!strcmp(got, rank0) && s[0].warmup == 10, "interleaved stage 0 by hand: warm-up (4-0-1)*2 + (2-1)*4 = 10");
	mt_pp_sched_free(&s[0]);
	mt_pp_sched_make(&s[0], MT_PP_1F1B, 4, 1, 3, 0, 0, 1, &e);
	mt_pp_sched_format(&s[0], got, sizeof(got));
	ok(!strcmp(got, "F0 F1 F2") && s[0].inflight[0] == 1, "forward only: the forwards, nothing kept");
	mt_pp_sched_free(&s[0]);
	/* the transfers: stage 1 of 2 receives each forward's input before it, sends each
	 * backward's gradient after it, and posts a receive one compute action early */
	mt_pp_sched_make(&s[0], MT_PP_1F1B, 2, 1, 2, 1, 0, 0, &e);
	{
		static const int want[][2] = { { MT_PP_RECV_FWD, 0 }, { MT_PP_FWD, 0 }, { MT_PP_RECV_FWD, 1 }, { MT_PP_BWD, 0 },
					       { MT_PP_SEND_BWD, 0 }, { MT_PP_FWD, 1 }, { MT_PP_BWD, 1 }, { MT_PP_SEND_BWD, 1 } };
		int same = s[0].n == 8;
		for (int i = 0; same && i < 8; i++)
			same = s[0].a[i].op == want[i][0] && s[0].a[i].mb == want[i][1];
		ok(same, "the last of 2 stages: receive, forward, backward, send, with the next receive posted early");
	}
	mt_pp_sched_free(&s[0]);

	/* an ordered transport (NCCL send/recv matches by order): every stage's sends on each
	 * edge in the order its peer receives them, for every schedule and valid count */
	{
		int checked = 0, bad = 0;
		char first[1100] = "";
		for (int k = 0; k < 3; k++)
			for (int p = 2; p <= 6; p++)
				for (int v = 1; v <= 3; v++)
					for (int m = 1; m <= 12; m++)
						for (int fo = 0; fo < 2; fo++) {
							if ((k != MT_PP_INTERLEAVED) != (v == 1) ||
							    mt_pp_sched_check(k, p, v, m, 0, &e))
								continue;
							for (int r = 0; r < p; r++) {
								struct mt_pp_sched x;
								if (mt_pp_sched_make(&x, k, p, v, m, r, 0, fo, &e))
									continue;
								checked++;
								if (mt_pp_sched_order_check(&x, &e)) {
									if (!bad++)
										snprintf(first, sizeof(first), "%s", e.msg);
								}
								mt_pp_sched_free(&x);
							}
						}
		ok(checked > 300 && !bad, "transfers in the same order on both ends of every edge (%d lists, %d not%s%s)",
		   checked, bad, bad ? ": " : "", first);
	}
	/* and the check sees a list whose sends are swapped */
	{
		struct mt_pp_sched x;
		int i1 = -1, i2 = -1, rc;
		mt_pp_sched_make(&x, MT_PP_1F1B, 4, 1, 8, 1, 0, 0, &e);
		for (int i = 0; i < x.n; i++)
			if (x.a[i].op == MT_PP_SEND_FWD)
				i1 < 0 ? (i1 = i) : i2 < 0 ? (i2 = i) : 0;
		x.a[i1].mb ^= x.a[i2].mb, x.a[i2].mb ^= x.a[i1].mb, x.a[i1].mb ^= x.a[i2].mb;
		rc = mt_pp_sched_order_check(&x, &e);
		ok(rc != 0 && strstr(e.msg, "from stage 1 to stage 2"), "two swapped sends are refused: %s", e.msg);
		mt_pp_sched_free(&x);
	}

	/* the sweep: every valid count runs without deadlock and with the formula's bubble */
	for (int k = 0; k < 3; k++)
		for (int p = 1; p <= 6; p++)
			for (int v = 1; v <= 3; v++)
				for (int m = 1; m <= 12; m++) {
					int peak;
					double b, want;
					if (mt_pp_sched_check((enum mt_pp_kind)k, p, v, m, 0, &e))
						continue;
					if (make_all(s, (enum mt_pp_kind)k, p, v, m, 0)) {
						fails++;
						continue;
					}
					b = simulate(s, p, &peak, why, sizeof(why));
					want = mt_pp_bubble((enum mt_pp_kind)k, p, v, m, 1, 1, 1);
					runs++;
					/* with fewer micro-batches than stages the pipeline never fills:
					 * the formulas hold from m >= p on */
					if (b < 0 || (m >= p && fabs(b - want) > 1e-9)) {
						if (fails++ < 5)
							printf("# %s p %d v %d m %d: simulated %.4f, formula %.4f %s\n",
							       mt_pp_kind_name((enum mt_pp_kind)k), p, v, m, b, want,
							       b < 0 ? why : "");
					}
					peaks &= peak;
					free_all(s, p);
				}
	ok(runs > 150 && fails == 0 && peaks,
	   "%d schedules (p 1..6, v 1..3, m 1..12): no deadlock, every pass once in order, the formulas' bubble, "
	   "the memory rule", runs);

	ok(mt_pp_sched_check(MT_PP_INTERLEAVED, 4, 2, 6, 0, &e) == -1 && e.code == MT_EXIT_USAGE && strstr(e.msg, "(6)"),
	   "interleaved p 4, m 6: refused (%s)", e.msg);
	ok(mt_pp_sched_check(MT_PP_INTERLEAVED, 4, 2, 2, 0, &e) == -1 && strstr(e.msg, "<="),
	   "interleaved p 4, m 2: refused (%s)", e.msg);
	ok(mt_pp_sched_check(MT_PP_INTERLEAVED, 4, 2, 9, 5, &e) == 0, "interleaved p 4, G 5, m 9: a last group of 4 runs");
	ok(mt_pp_sched_check(MT_PP_ZBH1, 4, 2, 8, 0, &e) == -1 && strstr(e.msg, "zb-h1"),
	   "ZB-H1 with virtual stages: refused (%s)", e.msg);
	ok(mt_pp_kind_parse("zb-h1") == MT_PP_ZBH1 && mt_pp_kind_parse("1f1b") == MT_PP_1F1B &&
		   mt_pp_kind_parse("gpipe") == -1, "schedule names");
	return tap_done();
}
