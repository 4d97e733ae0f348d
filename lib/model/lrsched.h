/* lrsched.h: Megatron's learning-rate and weight-decay schedules.
 *
 * Megatron-core's OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py):
 * linear warmup from --lr-warmup-init, then a constant, linear, cosine,
 * inverse-square-root or WSD (warmup-stable-decay) decay to --min-lr over the decay
 * steps, --min-lr after them; weight decay from --start-weight-decay to
 * --end-weight-decay. Megatron counts steps in samples: it steps the scheduler by the
 * global batch size every iteration, and mt_sched_init_iters sets it up that way from
 * iteration counts. The state is saved in checkpoints as JSON with Megatron's
 * state_dict names. It knows nothing of the optimizer: the caller hands mt_sched_lr
 * and mt_sched_wd to it every step. (The file is lrsched.h, not sched.h, which -Ilib
 * would put in place of the system's <sched.h>.) */
#ifndef MT_LRSCHED_H
#define MT_LRSCHED_H

#include <stdint.h>

#include "base/err.h"

enum mt_lr_style { MT_LR_CONSTANT, MT_LR_LINEAR, MT_LR_COSINE, MT_LR_INV_SQRT, MT_LR_WSD };
enum mt_wsd_style { MT_WSD_LINEAR, MT_WSD_COSINE, MT_WSD_EXPONENTIAL, MT_WSD_MINUS_SQRT };
enum mt_wd_style { MT_WD_CONSTANT, MT_WD_LINEAR, MT_WD_COSINE };

/* The scheduler, field for field Megatron's (steps are whatever unit the caller steps by). */
struct mt_sched {
	double init_lr;                   /* --lr-warmup-init, 0 */
	double max_lr;                    /* --lr */
	double min_lr;                    /* --min-lr, 0 */
	double lr_warmup_steps;           /* fractional with --lr-warmup-fraction */
	int64_t lr_decay_steps;
	enum mt_lr_style lr_decay_style;
	int64_t wsd_decay_steps;          /* WSD's annealing phase; -1: none (Python's None) */
	enum mt_wsd_style lr_wsd_decay_style;
	double start_wd, end_wd;
	int64_t wd_incr_steps;
	enum mt_wd_style wd_incr_style;
	int64_t num_steps;                /* steps taken */
};

/* Megatron's flags for iteration-based training (--train-iters). */
struct mt_sched_args {
	double lr, min_lr, lr_warmup_init;
	int64_t train_iters;
	int64_t lr_decay_iters;           /* 0: train_iters */
	int64_t lr_warmup_iters;
	double lr_warmup_fraction;        /* < 0: not given; else warmup = fraction x decay steps */
	int64_t lr_wsd_decay_iters;       /* -1: not given */
	enum mt_lr_style lr_decay_style;  /* --lr-decay-style, linear */
	enum mt_wsd_style lr_wsd_decay_style; /* --lr-wsd-decay-style, exponential */
	double start_weight_decay, end_weight_decay;
	enum mt_wd_style weight_decay_incr_style; /* constant */
	int64_t global_batch_size;
};

/* Megatron's defaults for the flags (lr, train_iters and global_batch_size stay 0). */
void mt_sched_args_defaults(struct mt_sched_args *a);
/* Megatron's get_optimizer_param_scheduler: steps are samples (iterations x global batch
 * size); num_steps 0. Checked with mt_sched_validate. */
int mt_sched_init_iters(struct mt_sched *s, const struct mt_sched_args *a, struct mt_err *err);
/* Megatron's assertions on the settings, as MT_EXIT_USAGE errors naming the flag. */
int mt_sched_validate(const struct mt_sched *s, struct mt_err *err);

/* The learning rate and weight decay at s->num_steps (Megatron's get_lr, get_wd). */
double mt_sched_lr(const struct mt_sched *s);
double mt_sched_wd(const struct mt_sched *s);
/* num_steps += increment (Megatron: the global batch size, once per iteration). */
void mt_sched_step(struct mt_sched *s, int64_t increment);

/* Style names as Megatron's flags spell them ("inverse-square-root", "WSD", "minus_sqrt");
 * parse returns -1 for an unknown name. */
const char *mt_lr_style_name(enum mt_lr_style st);
const char *mt_wsd_style_name(enum mt_wsd_style st);
const char *mt_wd_style_name(enum mt_wd_style st);
int mt_lr_style_parse(const char *name);
int mt_wsd_style_parse(const char *name);
int mt_wd_style_parse(const char *name);

/* JSON object with Megatron's state_dict keys (max_lr, lr_warmup_steps, num_steps,
 * lr_decay_style, lr_decay_steps, min_lr, start_wd, end_wd, wd_incr_style,
 * wd_incr_steps) plus init_lr, wsd_decay_steps and lr_wsd_decay_style, which Megatron
 * takes from its flags; doubles with 17 significant digits, so that a round trip is
 * exact. NULL when out of memory; free() it. */
char *mt_sched_to_json(const struct mt_sched *s);
/* Restore from such a text: the keys present replace the fields of *s (set it from
 * the flags first, as Megatron's load_state_dict does; its older key names start_lr,
 * warmup_iter, warmup_steps, end_iter, decay_steps, decay_style and num_iters are
 * read too), then the result is validated. MT_EXIT_DATA on a bad text. */
int mt_sched_from_json(struct mt_sched *s, const char *json, struct mt_err *err);

#endif
