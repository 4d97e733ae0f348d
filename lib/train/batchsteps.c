/* batchsteps.c: Megatron's step batch-size schedule (see batchsteps.h). */
#include "train/batchsteps.h"

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
	if (*end || b <= 0 || !(t >= 0))
		goto bad;
	if (s->n == MT_BATCH_STEPS_MAX)
		return mt_err_set(err, MT_EXIT_USAGE, "--step-batch-size-schedule: more than %d steps", MT_BATCH_STEPS_MAX);
	t *= mul;
	if (s->n == 0 ? t != 0 : t <= s->at[s->n - 1])
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--step-batch-size-schedule '%s': thresholds must start at 0 and grow", w);
	s->at[s->n] = t;
	s->batch[s->n++] = b;
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
		for (char *w = strtok_r(copy, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
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

int64_t mt_batch_steps_at(const struct mt_batch_steps *s, double tokens)
{
	int k = 0;

	while (k + 1 < s->n && tokens >= s->at[k + 1])
		k++;
	return s->batch[k];
}
