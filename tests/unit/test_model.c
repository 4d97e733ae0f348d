/* Unit tests for lib/ckpt/model.c: a checkpoint saved by the trainer's path opens with the
 * same config and bit-identical weights from each form of path, the recorded tokenizer
 * fills only what the caller left unset (and only for the same type), NullTokenizer gets
 * its size from the model, a checkpoint without a recorded tokenizer is a clear error,
 * and a missing checkpoint fails without leaving anything to free. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/model.h"
#include "tap.h"

static int save_tiny(const char *dir, struct mt_config *c, struct mt_params *t, float **w, const char *args)
{
	struct mt_err e = { 0 };
	char *cj;
	int rc;

	memset(c, 0, sizeof(*c));
	c->num_layers = 2;
	c->hidden_size = 16;
	c->num_attention_heads = 2;
	c->seq_length = 8;
	c->vocab_size = 65;
	mt_config_defaults(c);
	if (mt_config_validate(c, &e) || mt_params_build(t, c, &e))
		return -1;
	*w = malloc((size_t)t->total * sizeof(float));
	mt_params_init(t, *w, 7);
	cj = mt_config_to_json(c);
	struct mt_ckpt_state s = { .iteration = 12, .config_json = cj, .train_args_json = args };
	rc = mt_ckpt_save(dir, t, *w, NULL, NULL, &s, 0, &e);
	if (rc)
		printf("# %s\n", e.msg);
	free(cj);
	return rc;
}

int main(void)
{
	char dir[256], sub[300];
	struct mt_config c;
	struct mt_params t;
	struct mt_model m;
	struct mt_err e = { 0 };
	float *w;

	snprintf(dir, sizeof(dir), "/tmp/mt-test-model.%d", (int)getpid());
	ok(save_tiny(dir, &c, &t, &w,
		     "{\"argv\": [], \"tokenizer\": {\"type\": \"GPT2BPETokenizer\", \"vocab_file\": \"/v.json\", "
		     "\"merge_file\": \"/m.txt\"}}") == 0, "a tiny checkpoint is saved");

	ok(mt_model_open(&m, dir, &e) == 0, "the checkpoint directory opens: %s", e.msg);
	ok(m.iteration == 12 && m.cfg.hidden_size == 16 && m.cfg.num_layers == 2, "iteration and config read back");
	ok(m.params.total == t.total && memcmp(m.w, w, (size_t)t.total * sizeof(float)) == 0,
	   "weights are bit-identical");
	ok(m.tok_type && strcmp(m.tok_type, "GPT2BPETokenizer") == 0 && m.tok_model == NULL,
	   "the recorded tokenizer is read");
	{
		struct mt_tokenizer_args a = { 0 };
		ok(mt_model_tokenizer_args(&m, &a, &e) == 0 && strcmp(a.vocab_file, "/v.json") == 0 &&
		   strcmp(a.merge_file, "/m.txt") == 0, "unset tokenizer arguments come from the checkpoint");
	}
	{
		struct mt_tokenizer_args a = { .vocab_file = "/mine.json" };
		ok(mt_model_tokenizer_args(&m, &a, &e) == 0 && strcmp(a.vocab_file, "/mine.json") == 0 &&
		   strcmp(a.merge_file, "/m.txt") == 0, "the caller's own flags win");
	}
	{
		struct mt_tokenizer_args a = { .type = "TikTokenizer" };
		ok(mt_model_tokenizer_args(&m, &a, &e) == 0 && a.vocab_file == NULL && a.merge_file == NULL,
		   "another type takes none of the recorded files");
	}
	{
		struct mt_tokenizer_args a = { .type = "NullTokenizer" };
		ok(mt_model_tokenizer_args(&m, &a, &e) == 0 && a.vocab_size == 64,
		   "NullTokenizer's size is the model's vocabulary less its end-of-document id");
	}
	mt_model_close(&m);

	snprintf(sub, sizeof(sub), "%s/iter_0000012", dir);
	ok(mt_model_open(&m, sub, &e) == 0 && m.iteration == 12, "an iteration directory opens");
	mt_model_close(&m);
	snprintf(sub, sizeof(sub), "%s/iter_0000012/model.h5", dir);
	ok(mt_model_open(&m, sub, &e) == 0 && m.iteration == 12, "the .h5 file opens");
	mt_model_close(&m);

	/* no tokenizer recorded (mock data) */
	free(w);
	mt_params_free(&t);
	ok(save_tiny(dir, &c, &t, &w, "{\"argv\": []}") == 0, "a checkpoint without a tokenizer record is saved");
	ok(mt_model_open(&m, dir, &e) == 0 && m.tok_type == NULL, "it opens with no tokenizer");
	{
		struct mt_tokenizer_args a = { 0 };
		mt_err_clear(&e);
		ok(mt_model_tokenizer_args(&m, &a, &e) == -1 && e.code == MT_EXIT_USAGE &&
		   strstr(e.msg, "--tokenizer-type"), "no tokenizer anywhere is a usage error: %s", e.msg);
	}
	mt_model_close(&m);

	mt_err_clear(&e);
	snprintf(sub, sizeof(sub), "%s/nope", dir);
	ok(mt_model_open(&m, sub, &e) == -1 && e.msg[0], "a missing checkpoint fails: %s", e.msg);
	ok(m.w == NULL, "and leaves nothing to free");

	free(w);
	mt_params_free(&t);
	{
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd))
			return 1;
	}
	return tap_done();
}
