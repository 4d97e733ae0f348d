/* mt-logprobs: mt's log-probabilities for one sequence of token ids, for comparison with
 * independent implementations (tests/reference/hf_*_logits.py, hf_transformers_check.py).
 *
 *   mt-logprobs CKPT --ids 1,2,3 --output FILE.npy
 *
 * CKPT is anything mt_model_open takes. FILE gets float64 [T, vocab_size]: the CPU
 * forward pass's log-softmax over the real vocabulary (padding excluded; lib/ckpt/hfio.h
 * mt_hf_logprobs), one row per position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bin/tool.h"
#include "ckpt/hfio.h"
#include "ckpt/model.h"
#include "data/npy.h"

enum { O_IDS = 256, O_OUTPUT };

static const struct mt_option opts[] = {
	{ "ids", 0, MT_ARG_REQUIRED, O_IDS, "LIST", "comma-separated token ids" },
	{ "output", 'o', MT_ARG_REQUIRED, O_OUTPUT, "FILE", "float64 .npy [T, vocab]" },
	{ 0 },
};

static const char *const synopsis[] = { "CKPT --ids LIST --output FILE", NULL };
static const struct mt_tool_info info = { "mt-logprobs", "mt's log-probabilities of a sequence, for reference checks",
					  synopsis, NULL, NULL };

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_err e = { 0 };
	struct mt_model m;
	const char *ckpt = NULL, *ids = NULL, *out = NULL;
	int32_t tok[4096];
	int T = 0, id;
	double *lp;

	mt_tool_start(&info);
	if (mt_opt_init(&o, &info, opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (id == O_IDS)
			ids = o.arg;
		else if (id == O_OUTPUT)
			out = o.arg;
		else if (id == MT_OPT_ARG)
			ckpt = o.arg;
	}
	if (!ckpt || !ids || !out)
		mt_die_usage(&o, "CKPT, --ids and --output are required");
	for (const char *s = ids; *s && T < 4096;) {
		char *end;
		tok[T++] = (int32_t)strtol(s, &end, 10);
		if (end == s)
			mt_die_usage(&o, "--ids: not a list of integers: '%s'", ids);
		s = *end == ',' ? end + 1 : end;
	}
	if (mt_model_open(&m, ckpt, &e))
		mt_die_err(&e);
	lp = malloc((size_t)T * (size_t)m.cfg.vocab_size * sizeof(double));
	if (!lp)
		mt_die(MT_EXIT_IO, "out of memory");
	if (mt_hf_logprobs(&m.cfg, &m.params, m.w, tok, T, lp, &e) ||
	    mt_npy_write(out, "<f8", lp, (size_t)T, (size_t)m.cfg.vocab_size, &e))
		mt_die_err(&e);
	free(lp);
	mt_model_close(&m);
	return 0;
}
