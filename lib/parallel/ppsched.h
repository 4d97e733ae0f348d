/* ppsched.h: pipeline schedules as data.
 *
 * A generator turns (schedule, p stages, v model chunks a stage, m micro-batches, this
 * stage) into the list of actions the stage runs in one step: forward passes, backward
 * passes (whole, or split into the input-gradient pass B and the weight-gradient pass W)
 * and the sends and receives between them. One executor (pipeline.h) runs any list; a
 * new schedule is a new generator. The counts are Megatron's (specs: "Pipeline
 * parallelism"):
 *   1F1B          on stage r, w = min(p - r - 1, m) warm-up forwards, m - w steady pairs
 *                 of one forward and one backward, w cool-down backwards
 *   interleaved   v chunks a stage, chunk c of stage r holding virtual stage c p + r; the
 *                 m v virtual micro-batches in Megatron's table order (groups of G micro-
 *                 batches; in a group, chunk by chunk, micro-batch by micro-batch; the
 *                 backward visiting chunks in reverse); w = min((p - r - 1) 2 + (v - 1) G,
 *                 m v) warm-up forwards, then the steady pairs and the cool-down; needs
 *                 p <= G <= m and m % G either 0 or at least p (Megatron's rule)
 *   ZB-H1         1F1B's forwards and input-gradient passes (Qi et al. 2023), each weight-
 *                 gradient pass deferred by r passes on stage r, the deferred ones filling
 *                 the cool-down: at most p micro-batches in flight on every stage (1F1B's
 *                 first-stage peak), bubble (p - 1)(T_F + T_B - T_W)
 * Forward-only lists (evaluation) hold the forwards in order. Receives are posted one
 * compute action before the action that needs them, sends right after the action that
 * produces them, so transfers overlap with compute. Pure arithmetic: no processes here. */
#ifndef MT_PPSCHED_H
#define MT_PPSCHED_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum mt_pp_kind { MT_PP_1F1B, MT_PP_INTERLEAVED, MT_PP_ZBH1 };

enum mt_pp_op {
	MT_PP_FWD,              /* forward of (chunk, mb) */
	MT_PP_BWD,              /* whole backward */
	MT_PP_BWD_INPUT,        /* B: the input's gradient (and the cheap parameter gradients) */
	MT_PP_BWD_WEIGHT,       /* W: the linear layers' weight gradients */
	MT_PP_RECV_FWD,         /* post the receive of the activations of (chunk, mb) */
	MT_PP_SEND_FWD,         /* send the activations (chunk, mb) produced */
	MT_PP_RECV_BWD,         /* post the receive of the gradient of (chunk, mb)'s output */
	MT_PP_SEND_BWD,         /* send the gradient of (chunk, mb)'s input */
	MT_PP_NOPS
};

struct mt_pp_action {
	int op, chunk, mb;
};

struct mt_pp_sched {
	enum mt_pp_kind kind;
	int p, v, m, rank, group;       /* group: micro-batches per group (interleaved) */
	int forward_only;
	int warmup;                     /* forwards before the first backward */
	struct mt_pp_action *a;
	int n;
	int *inflight;                  /* per chunk: the most micro-batches whose forward ran and
					 * whose activations are still needed (until B, or W) */
};

/* Whether schedule `kind` can run m micro-batches on p stages of v chunks with groups of
 * G (0: p); fails with MT_EXIT_USAGE naming the rule and the flags. */
int mt_pp_sched_check(enum mt_pp_kind kind, int p, int v, int m, int G, struct mt_err *err);
/* The actions of stage `rank`; forward_only: evaluation (forwards only). */
int mt_pp_sched_make(struct mt_pp_sched *s, enum mt_pp_kind kind, int p, int v, int m, int rank, int G,
		     int forward_only, struct mt_err *err);
void mt_pp_sched_free(struct mt_pp_sched *s);
/* Whether every transfer s sends reaches its peer in the order the peer's list receives
 * them, per direction and kind (activations to the next stage, gradients to the
 * previous): what an ordered transport such as NCCL's send/recv needs, where matching
 * is by order alone. Makes the two peers' lists; MT_EXIT_USAGE naming the edge if not. */
int mt_pp_sched_order_check(const struct mt_pp_sched *s, struct mt_err *err);

/* "1f1b", "interleaved", "zb-h1"; parse returns -1 for another name */
const char *mt_pp_kind_name(enum mt_pp_kind kind);
int mt_pp_kind_parse(const char *name);

/* The virtual stage of chunk c on stage r: c p + r (0 embeds, p v - 1 computes the loss). */
static inline int mt_pp_vstage(const struct mt_pp_sched *s, int chunk) { return chunk * s->p + s->rank; }

/* The bubble over the ideal step time (the compute of m micro-batches), from the papers:
 * 1F1B (p - 1)/m, interleaved (p - 1)/(v m), ZB-H1 (p - 1)(t_f + t_b - t_w) /
 * (m (t_f + t_b + t_w)) with the passes' times (all 1: (p - 1)/(3 m)); t_b is the input-
 * gradient pass, t_w the weight-gradient pass (1F1B's backward is t_b + t_w). */
double mt_pp_bubble(enum mt_pp_kind kind, int p, int v, int m, double t_f, double t_b, double t_w);

/* The compute actions as text, "F0 F1 B0 W0 ..." (chunk c > 0 as "F3.1"; forward, whole
 * backward B, input-gradient B, weight-gradient W), into buf of size n. */
void mt_pp_sched_format(const struct mt_pp_sched *s, char *buf, size_t n);

#endif
