/* batchsteps.c: Megatron's step batch-size schedule (see batchsteps.h). */
#include "train/batchsteps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pair(struct mt_batch_steps *s, const char *w, struct mt_err *err)
{
	char *end;
	double t = strtod(w, &end), mul = 1;
	long long b;

	if (end == w)
		goto bad;
	switch (*end) {
	case 'K': case 'k': mul = 1e3, end++; break;
	case 'M': case 'm': mul = 1e6, end++; break;
	case 'B': case 'b': case 'G': case 'g': mul = 1e9, end++; break;
	case 'T': case 't': mul = 1e12, end++; break;
	}
	if (*end++ != ':')
		goto bad;
	b = strtoll(end, &end, 10);
	if (*end || b <= 0 || !(t >= 0) || !(t * mul < 9e18))
		goto bad;
	if (s->n == MT_BATCH_STEPS_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "--step-batch-size-schedule: more than %d steps", MT_BATCH_STEPS_MAX);
	/* Megatron: int(float(T) * multiplier), a whole number of tokens */
	int64_t at = (int64_t)(t * mul);
	if (s->n == 0 ? at != 0 : at <= s->at[s->n - 1])
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--step-batch-size-schedule '%s': thresholds must start at 0 and grow", w);
	s->at[s->n] = at;
	s->batch[s->n] = b;
	snprintf(s->word[s->n], sizeof(s->word[0]), "%s", w);
	s->n++;
	return 0;
bad:
	return mt_err_set(err, MT_EXIT_USAGE,
			  "--step-batch-size-schedule '%s': not TOKENS:BATCH (as \"0:16 2.4B:320\")", w);
}

int mt_batch_steps_parse(struct mt_batch_steps *s, char *const *words, int nwords, struct mt_err *err)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < nwords; i++) {
		char *copy = strdup(words[i]), *save = NULL;
		if (!copy)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		for (char *w = strtok_r(copy, " \t\n,", &save); w; w = strtok_r(NULL, " \t\n,", &save))
			if (pair(s, w, err)) {
				free(copy);
				return -1;
			}
		free(copy);
	}
	if (s->n == 0)
		return mt_err_set(err, MT_EXIT_USAGE, "--step-batch-size-schedule: no steps given");
	return 0;
}

int64_t mt_batch_steps_sample(const struct mt_batch_steps *s, int k, int64_t seq_length)
{
	return seq_length > 0 ? s->at[k] / seq_length : s->at[k];
}

int mt_batch_steps_entry(const struct mt_batch_steps *s, int64_t seq_length, int64_t consumed)
{
	int k = 0;

	while (k + 1 < s->n && consumed >= mt_batch_steps_sample(s, k + 1, seq_length))
		k++;
	return k;
}

int64_t mt_batch_steps_batch(const struct mt_batch_steps *s, int64_t seq_length, int64_t consumed)
{
	return s->batch[mt_batch_steps_entry(s, seq_length, consumed)];
}

int64_t mt_batch_steps_max(const struct mt_batch_steps *s)
{
	int64_t m = 0;

	for (int k = 0; k < s->n; k++)
		if (s->batch[k] > m)
			m = s->batch[k];
	return m;
}

int mt_batch_steps_check(const struct mt_batch_steps *s, int64_t seq_length, int64_t multiple, int64_t consumed,
			 struct mt_err *err)
{
	for (int k = 1; k < s->n; k++)
		if (mt_batch_steps_sample(s, k, seq_length) <= mt_batch_steps_sample(s, k - 1, seq_length))
			return mt_err_set(err, MT_EXIT_USAGE,
					  "--step-batch-size-schedule '%s' and '%s': both thresholds fall on sample %lld of "
					  "--seq-length %lld tokens (Megatron needs them on distinct samples)",
					  s->word[k - 1], s->word[k], (long long)mt_batch_steps_sample(s, k, seq_length),
					  (long long)seq_length);
	for (int k = mt_batch_steps_entry(s, seq_length, consumed); k < s->n && multiple > 0; k++)
		if (s->batch[k] % multiple)
			return mt_err_set(err, MT_EXIT_USAGE,
					  "--step-batch-size-schedule '%s': batch %lld is not a multiple of micro-batch x "
					  "data-parallel size %lld", s->word[k], (long long)s->batch[k], (long long)multiple);
	return 0;
}

int64_t mt_batch_steps_train_iters(const struct mt_batch_steps *s, int64_t seq_length, int64_t train_samples)
{
	int64_t it = 0, consumed = 0;

	for (;;) {
		int k = mt_batch_steps_entry(s, seq_length, consumed);
		int64_t b = s->batch[k];
		if (consumed + b > train_samples)
			return it;
		if (k == s->n - 1) /* the last batch from here on */
			return it + (train_samples - consumed) / b;
		consumed += b;
		it++;
	}
}
