/* ckpt-hash CKPT: load a checkpoint's weights and AdamW moments and print a hash of
 * their bytes with the iteration and optimizer step, so tests can compare two
 * checkpoints bit for bit (HDF5 files themselves carry timestamps). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../bin/tool.h"
#include "ckpt/ckpt.h"
#include "model/config.h"
#include "model/params.h"

static const struct mt_tool_info info = { "ckpt-hash", "test helper", NULL, NULL, NULL };

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

int main(int argc, char **argv)
{
	char dir[4096];
	int64_t it;
	struct mt_ckpt_loaded st;
	struct mt_config c;
	struct mt_params t;
	struct mt_err e = { 0 };
	float *w, *m, *v;
	uint64_t hw = 0xcbf29ce484222325ull, hm = hw;

	mt_tool_start(&info);
	if (argc != 2)
		mt_die(MT_EXIT_USAGE, "usage: ckpt-hash CKPT");
	if (mt_ckpt_resolve(argv[1], dir, sizeof(dir), &it, &e) || mt_ckpt_read_state(dir, &st, &e) ||
	    mt_config_from_json(&c, st.config_json, &e) || mt_params_build(&t, &c, &e))
		mt_die_err(&e);
	w = malloc((size_t)t.total * sizeof(float));
	m = calloc((size_t)t.total, sizeof(float));
	v = calloc((size_t)t.total, sizeof(float));
	if (mt_ckpt_load(dir, &t, w, st.has_optimizer ? m : NULL, st.has_optimizer ? v : NULL, 0, &e))
		mt_die_err(&e);
	hw = fnv(hw, w, (size_t)t.total * sizeof(float));
	hm = fnv(fnv(hm, m, (size_t)t.total * sizeof(float)), v, (size_t)t.total * sizeof(float));
	printf("iteration %lld samples %lld step %lld weights %016llx moments %016llx\n", (long long)st.iteration,
	       (long long)st.consumed_train_samples, (long long)st.optimizer_step, (unsigned long long)hw,
	       (unsigned long long)hm);
	mt_ckpt_loaded_free(&st);
	mt_params_free(&t);
	free(w), free(m), free(v);
	return 0;
}
