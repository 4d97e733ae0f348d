/* lrsched.c: Megatron's learning-rate and weight-decay schedules (see lrsched.h).
 *
 * mt_sched_lr and mt_sched_wd are OptimizerParamScheduler.get_lr and get_wd of
 * megatron/core/optimizer_param_scheduler.py, expression for expression in double as
 * Python evaluates them (x ** 0.5 is pow, math.sqrt is sqrt), so the learning rate is
 * the same double Megatron hands its optimizer. Python's asserts become
 * mt_sched_validate; nothing here allocates except the JSON text. */
#include "model/lrsched.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const lr_names[] = { "constant", "linear", "cosine", "inverse-square-root", "WSD" };
static const char *const wsd_names[] = { "linear", "cosine", "exponential", "minus_sqrt" };
static const char *const wd_names[] = { "constant", "linear", "cosine" };

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int v)
{
	return v >= 0 && v < n ? names[v] : "?";
}

static int parse_name(const char *const *names, int n, const char *s)
{
	for (int i = 0; s && i < n; i++)
		if (!strcmp(names[i], s))
			return i;
	return -1;
}

const char *mt_lr_style_name(enum mt_lr_style st) { return name_of(lr_names, NELEM(lr_names), st); }
const char *mt_wsd_style_name(enum mt_wsd_style st) { return name_of(wsd_names, NELEM(wsd_names), st); }
const char *mt_wd_style_name(enum mt_wd_style st) { return name_of(wd_names, NELEM(wd_names), st); }
int mt_lr_style_parse(const char *s) { return parse_name(lr_names, NELEM(lr_names), s); }
int mt_wsd_style_parse(const char *s) { return parse_name(wsd_names, NELEM(wsd_names), s); }
int mt_wd_style_parse(const char *s) { return parse_name(wd_names, NELEM(wd_names), s); }

void mt_sched_args_defaults(struct mt_sched_args *a)
{
	memset(a, 0, sizeof(*a));
	a->lr_warmup_fraction = -1;
	a->lr_wsd_decay_iters = -1;
	a->lr_decay_style = MT_LR_LINEAR;
	a->lr_wsd_decay_style = MT_WSD_EXPONENTIAL;
	a->start_weight_decay = a->end_weight_decay = 0.01; /* --weight-decay */
	a->weight_decay_incr_style = MT_WD_CONSTANT;
}

/* megatron/training/training.py, get_optimizer_param_scheduler, the --train-iters branch */
int mt_sched_init_iters(struct mt_sched *s, const struct mt_sched_args *a, struct mt_err *err)
{
	int64_t decay_iters = a->lr_decay_iters > 0 ? a->lr_decay_iters : a->train_iters;

	if (a->global_batch_size <= 0)
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --global-batch-size '%lld': must be positive",
				  (long long)a->global_batch_size);
	if (a->lr_warmup_fraction >= 0 && a->lr_warmup_iters > 0)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--lr-warmup-fraction and --lr-warmup-iters: give only one of them");
	memset(s, 0, sizeof(*s));
	s->init_lr = a->lr_warmup_init;
	s->max_lr = a->lr;
	s->min_lr = a->min_lr;
	s->lr_decay_steps = decay_iters * a->global_batch_size;
	s->wd_incr_steps = a->train_iters * a->global_batch_size;
	s->wsd_decay_steps = a->lr_wsd_decay_iters >= 0 ? a->lr_wsd_decay_iters * a->global_batch_size : -1;
	if (a->lr_warmup_fraction >= 0)
		s->lr_warmup_steps = a->lr_warmup_fraction * (double)s->lr_decay_steps;
	else
		s->lr_warmup_steps = (double)(a->lr_warmup_iters * a->global_batch_size);
	s->lr_decay_style = a->lr_decay_style;
	s->lr_wsd_decay_style = a->lr_wsd_decay_style;
	s->start_wd = a->start_weight_decay;
	s->end_wd = a->end_weight_decay;
	s->wd_incr_style = a->weight_decay_incr_style;
	s->num_steps = 0;
	return mt_sched_validate(s, err);
}

int mt_sched_validate(const struct mt_sched *s, struct mt_err *err)
{
	if ((unsigned)s->lr_decay_style >= (unsigned)NELEM(lr_names))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --lr-decay-style");
	if ((unsigned)s->lr_wsd_decay_style >= (unsigned)NELEM(wsd_names))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --lr-wsd-decay-style");
	if ((unsigned)s->wd_incr_style >= (unsigned)NELEM(wd_names))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --weight-decay-incr-style");
	if (!(s->min_lr >= 0.0))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --min-lr '%g': must not be negative", s->min_lr);
	if (!(s->max_lr >= s->min_lr))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --lr '%g': below --min-lr '%g'", s->max_lr, s->min_lr);
	if (!(s->init_lr <= s->max_lr))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --lr-warmup-init '%g': above --lr '%g'",
				  s->init_lr, s->max_lr);
	if (s->lr_decay_steps <= 0)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "invalid --lr-decay-iters: the decay steps (%lld) must be positive",
				  (long long)s->lr_decay_steps);
	if (!(s->lr_warmup_steps >= 0 && s->lr_warmup_steps < (double)s->lr_decay_steps))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "invalid --lr-warmup-iters: the warmup steps (%g) must be fewer than the decay steps (%lld)",
				  s->lr_warmup_steps, (long long)s->lr_decay_steps);
	if (s->lr_decay_style == MT_LR_WSD && s->wsd_decay_steps < 0)
		return mt_err_set(err, MT_EXIT_USAGE, "--lr-decay-style WSD needs --lr-wsd-decay-iters");
	if (s->lr_decay_style == MT_LR_WSD && s->wsd_decay_steps == 0)
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --lr-wsd-decay-iters '0': must be positive");
	if (s->num_steps < 0)
		return mt_err_set(err, MT_EXIT_USAGE, "invalid step count %lld: must not be negative",
				  (long long)s->num_steps);
	if (!(s->start_wd >= 0.0))
		return mt_err_set(err, MT_EXIT_USAGE, "invalid --start-weight-decay '%g': must not be negative",
				  s->start_wd);
	if (!(s->end_wd >= s->start_wd))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "invalid --end-weight-decay '%g': below --start-weight-decay '%g'", s->end_wd,
				  s->start_wd);
	if (s->wd_incr_style == MT_WD_CONSTANT && s->start_wd != s->end_wd)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--weight-decay-incr-style constant needs --start-weight-decay equal to --end-weight-decay");
	if (s->wd_incr_style != MT_WD_CONSTANT && s->wd_incr_steps <= 0)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--weight-decay-incr-style %s needs --train-iters", mt_wd_style_name(s->wd_incr_style));
	return 0;
}

double mt_sched_lr(const struct mt_sched *s)
{
	const double max_lr = s->max_lr, min_lr = s->min_lr;
	double decay_ratio, delta_lr, coeff = 1.0;

	/* linear warmup */
	if (s->lr_warmup_steps > 0 && (double)s->num_steps <= s->lr_warmup_steps)
		return s->init_lr + ((max_lr - s->init_lr) * (double)s->num_steps / s->lr_warmup_steps);
	if (s->lr_decay_style == MT_LR_CONSTANT)
		return max_lr;
	if (s->num_steps > s->lr_decay_steps)
		return min_lr;
	if (s->lr_decay_style == MT_LR_INV_SQRT) {
		double warmup = s->lr_warmup_steps > 1 ? s->lr_warmup_steps : 1;
		double num = (double)(s->num_steps > 1 ? s->num_steps : 1);
		double lr = max_lr * pow(warmup, 0.5) / pow(num, 0.5);

		return lr > min_lr ? lr : min_lr;
	}
	decay_ratio = ((double)s->num_steps - s->lr_warmup_steps) / ((double)s->lr_decay_steps - s->lr_warmup_steps);
	delta_lr = max_lr - min_lr;
	switch (s->lr_decay_style) {
	case MT_LR_LINEAR:
		coeff = 1.0 - decay_ratio;
		break;
	case MT_LR_COSINE:
		coeff = 0.5 * (cos(M_PI * decay_ratio) + 1.0);
		break;
	case MT_LR_WSD: {
		int64_t anneal_start = s->lr_decay_steps - s->wsd_decay_steps;
		double r;

		if (s->num_steps <= anneal_start)
			break;
		r = (double)(s->num_steps - anneal_start) / (double)s->wsd_decay_steps;
		switch (s->lr_wsd_decay_style) {
		case MT_WSD_LINEAR:
			coeff = 1.0 - r;
			break;
		case MT_WSD_COSINE:
			coeff = 0.5 * (cos(M_PI * r) + 1.0);
			break;
		case MT_WSD_EXPONENTIAL:
			coeff = 2.0 * pow(0.5, r) - 1.0;
			break;
		case MT_WSD_MINUS_SQRT:
			coeff = 1.0 - sqrt(r);
			break;
		}
		break;
	}
	default:
		break;
	}
	return min_lr + coeff * delta_lr;
}

double mt_sched_wd(const struct mt_sched *s)
{
	double ratio, coeff;

	if (s->num_steps > s->wd_incr_steps)
		return s->end_wd;
	if (s->wd_incr_style == MT_WD_CONSTANT)
		return s->end_wd;
	ratio = (double)s->num_steps / (double)s->wd_incr_steps;
	if (s->wd_incr_style == MT_WD_LINEAR)
		coeff = ratio;
	else
		coeff = 0.5 * (cos(M_PI * (1 - ratio)) + 1.0);
	return s->start_wd + coeff * (s->end_wd - s->start_wd);
}

void mt_sched_step(struct mt_sched *s, int64_t increment)
{
	s->num_steps += increment;
}

/* Python writes a step count that is a whole number as an int (lr_warmup_steps is a
 * float only from --lr-warmup-fraction). */
static json_t *json_steps(double v)
{
	if (v == floor(v) && fabs(v) < 9007199254740992.0)
		return json_integer((json_int_t)v);
	return json_real(v);
}

char *mt_sched_to_json(const struct mt_sched *s)
{
	json_t *o = json_object();
	char *text;

	if (!o)
		return NULL;
	json_object_set_new(o, "max_lr", json_real(s->max_lr));
	json_object_set_new(o, "lr_warmup_steps", json_steps(s->lr_warmup_steps));
	json_object_set_new(o, "num_steps", json_integer(s->num_steps));
	json_object_set_new(o, "lr_decay_style", json_string(mt_lr_style_name(s->lr_decay_style)));
	json_object_set_new(o, "lr_decay_steps", json_integer(s->lr_decay_steps));
	json_object_set_new(o, "min_lr", json_real(s->min_lr));
	json_object_set_new(o, "start_wd", json_real(s->start_wd));
	json_object_set_new(o, "end_wd", json_real(s->end_wd));
	json_object_set_new(o, "wd_incr_style", json_string(mt_wd_style_name(s->wd_incr_style)));
	json_object_set_new(o, "wd_incr_steps", json_integer(s->wd_incr_steps));
	/* not in Megatron's state_dict (it takes them from the flags) */
	json_object_set_new(o, "init_lr", json_real(s->init_lr));
	json_object_set_new(o, "wsd_decay_steps", s->wsd_decay_steps >= 0 ? json_integer(s->wsd_decay_steps) : json_null());
	json_object_set_new(o, "lr_wsd_decay_style", json_string(mt_wsd_style_name(s->lr_wsd_decay_style)));
	text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(o);
	return text;
}

/* The first of the keys present, or NULL. */
static json_t *get_any(json_t *o, const char *const *keys, int n)
{
	for (int i = 0; i < n; i++) {
		json_t *v = json_object_get(o, keys[i]);

		if (v)
			return v;
	}
	return NULL;
}

static int get_number(json_t *o, const char *const *keys, int n, double *out, struct mt_err *err)
{
	json_t *v = get_any(o, keys, n);

	if (!v)
		return 0;
	if (!json_is_number(v))
		return mt_err_set(err, MT_EXIT_DATA, "scheduler state: '%s' is not a number", keys[0]);
	*out = json_number_value(v);
	return 0;
}

static int get_int(json_t *o, const char *const *keys, int n, int64_t *out, struct mt_err *err)
{
	json_t *v = get_any(o, keys, n);

	if (!v)
		return 0;
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
	    fabs(json_real_value(v)) < 9007199254740992.0) {
		*out = (int64_t)json_real_value(v);
		return 0;
	}
	return mt_err_set(err, MT_EXIT_DATA, "scheduler state: '%s' is not a whole number", keys[0]);
}

static int get_style(json_t *o, const char *const *keys, int n, int (*parse)(const char *), int *out,
		     struct mt_err *err)
{
	json_t *v = get_any(o, keys, n);
	int st;

	if (!v)
		return 0;
	if (!json_is_string(v))
		return mt_err_set(err, MT_EXIT_DATA, "scheduler state: '%s' is not a string", keys[0]);
	if ((st = parse(json_string_value(v))) < 0)
		return mt_err_set(err, MT_EXIT_DATA, "scheduler state: unknown %s '%s'", keys[0],
				  json_string_value(v));
	*out = st;
	return 0;
}

int mt_sched_from_json(struct mt_sched *s, const char *text, struct mt_err *err)
{
	static const char *const k_max_lr[] = { "max_lr", "start_lr" };
	static const char *const k_min_lr[] = { "min_lr" };
	static const char *const k_init_lr[] = { "init_lr" };
	static const char *const k_warmup[] = { "lr_warmup_steps", "warmup_iter", "warmup_steps" };
	static const char *const k_decay[] = { "lr_decay_steps", "end_iter", "decay_steps" };
	static const char *const k_style[] = { "lr_decay_style", "decay_style" };
	static const char *const k_num[] = { "num_steps", "num_iters" };
	static const char *const k_start_wd[] = { "start_wd" };
	static const char *const k_end_wd[] = { "end_wd" };
	static const char *const k_wd_steps[] = { "wd_incr_steps" };
	static const char *const k_wd_style[] = { "wd_incr_style" };
	static const char *const k_wsd_steps[] = { "wsd_decay_steps" };
	static const char *const k_wsd_style[] = { "lr_wsd_decay_style" };
	struct mt_sched t = *s;
	json_error_t je;
	json_t *o = json_loads(text, 0, &je), *v;
	int st, rc = -1;

	if (!o || !json_is_object(o)) {
		if (o)
			mt_err_set(err, MT_EXIT_DATA, "scheduler state is not a JSON object");
		else
			mt_err_set(err, MT_EXIT_DATA, "scheduler state is not valid JSON: line %d: %s", je.line, je.text);
		json_decref(o);
		return -1;
	}
#define N(k) (k), NELEM(k)
	if (get_number(o, N(k_max_lr), &t.max_lr, err) || get_number(o, N(k_min_lr), &t.min_lr, err) ||
	    get_number(o, N(k_init_lr), &t.init_lr, err) || get_number(o, N(k_warmup), &t.lr_warmup_steps, err) ||
	    get_int(o, N(k_decay), &t.lr_decay_steps, err) || get_int(o, N(k_num), &t.num_steps, err) ||
	    get_number(o, N(k_start_wd), &t.start_wd, err) || get_number(o, N(k_end_wd), &t.end_wd, err) ||
	    get_int(o, N(k_wd_steps), &t.wd_incr_steps, err))
		goto out;
	st = (int)t.lr_decay_style;
	if (get_style(o, N(k_style), mt_lr_style_parse, &st, err))
		goto out;
	t.lr_decay_style = (enum mt_lr_style)st;
	st = (int)t.wd_incr_style;
	if (get_style(o, N(k_wd_style), mt_wd_style_parse, &st, err))
		goto out;
	t.wd_incr_style = (enum mt_wd_style)st;
	st = (int)t.lr_wsd_decay_style;
	if (get_style(o, N(k_wsd_style), mt_wsd_style_parse, &st, err))
		goto out;
	t.lr_wsd_decay_style = (enum mt_wsd_style)st;
	v = json_object_get(o, "wsd_decay_steps");
	if (v && json_is_null(v))
		t.wsd_decay_steps = -1;
	else if (get_int(o, N(k_wsd_steps), &t.wsd_decay_steps, err))
		goto out;
#undef N
	if (mt_sched_validate(&t, err)) {
		err->code = MT_EXIT_DATA;
		mt_err_prefix(err, "scheduler state");
		goto out;
	}
	*s = t;
	rc = 0;
out:
	json_decref(o);
	return rc;
}
