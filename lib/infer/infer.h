/* infer.h: what generation asks of a compute backend: the GPT forward for inference,
 * with a key/value cache.
 *
 * An engine holds the model's weights and a cache of every layer's keys and values for
 * max_batch sequences ("slots") of up to max_len tokens each, all planned at init, so
 * nothing grows during generation. Grouped-query attention caches only the key/value
 * groups. Two calls drive it:
 *
 *   prefill  starts sequences in some slots from whole prompts of different lengths
 *            together (no padding: each prompt keeps its own positions 0..len-1, for
 *            learned and rotary positions alike) and returns the logits after each
 *            prompt's last token; on request, the log-probability of every prompt token
 *            after the first given the ones before it;
 *   decode   appends one token to each of some slots, attending over that slot's cached
 *            keys and values, and returns the logits of the next token;
 *   decode_sample (optional) the same step, choosing each row's next token where the
 *            logits are (the GPU) by sample.h's rules, returning only the ids.
 *
 * Logits are raw (temperature 1) over the padded vocabulary, [n][padded_vocab_size];
 * whoever samples must look at the first vocab_size only (sample.h). The arithmetic is
 * the same as gpt.c's training forward (LayerNorm/RMSNorm, GELU tanh/SwiGLU, biases or
 * not, tied or untied output). infer_cpu.c is the reference (fp32, OpenBLAS, OpenMP);
 * infer_cuda.c implements the same table on a GPU. This file holds no sampling (the
 * engine that has decode_sample implements sample.h's rules itself) and no text. */
#ifndef MT_INFER_H
#define MT_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "base/err.h"
#include "model/params.h"

struct mt_infer;
struct mt_sample_params;

struct mt_infer_ops {
	const char *name;
	/* w: t->total fp32 weights in params.h's layout; the engine may keep the pointer
	 * (the CPU one does: w must outlive it) or copy it */
	int (*init)(struct mt_infer *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		    int max_batch, int max_len, struct mt_err *err);
	void (*free)(struct mt_infer *e);
	/* n prompts into slots[i] (NULL: slot i), prompt i being tokens[i][0..lens[i]),
	 * 1 <= lens[i] <= max_len; the slots' earlier contents are dropped. logits:
	 * [n][padded vocab] after each prompt's last token. lp: NULL, or n arrays where
	 * lp[i][j] (j < lens[i]-1) receives log p(tokens[i][j+1] | tokens[i][0..j]),
	 * a log-softmax over the real vocabulary at temperature 1 */
	int (*prefill)(struct mt_infer *e, int n, const int *slots, const int32_t *const *tokens, const int *lens,
		       float *logits, float *const *lp, struct mt_err *err);
	/* one token for each of n slots (slots NULL: 0..n-1); logits [n][padded vocab] */
	int (*decode)(struct mt_infer *e, int n, const int *slots, const int32_t *tokens, float *logits,
		      struct mt_err *err);
	/* NULL, or decode then the next token of each row as mt_sample (sample.h) would choose
	 * it from that row's logits with sp and the uniform number u[i], into next[i] */
	int (*decode_sample)(struct mt_infer *e, int n, const int *slots, const int32_t *tokens,
			     const struct mt_sample_params *sp, const double *u, int32_t *next, struct mt_err *err);
	size_t (*bytes)(const struct mt_infer *e); /* memory held, cache included */
};

struct mt_infer {
	const struct mt_infer_ops *ops;
	void *state;
	int max_batch, max_len;
	int64_t vocab, padded_vocab;
};

/* An engine's init: the sizes checked (at most batch_limit sequences; learned positions
 * cover max_len) and e's public fields set. 0, or -1 with err set. */
int mt_infer_setup(struct mt_infer *e, const struct mt_config *c, int max_batch, int max_len, int batch_limit,
		   struct mt_err *err);
/* What every engine checks first (infer.c): 1 <= n <= max_batch, slots in range, prompt
 * lengths 1..max_len, token ids inside the padded vocabulary, with want_lp every prompt
 * token after the first inside the real one (it has a log-probability), and no decode
 * into a full slot (pos: tokens cached per slot). 0, or -1 with err set. */
int mt_infer_check_prefill(const struct mt_infer *e, int n, const int *slots, const int32_t *const *tokens,
			   const int *lens, int want_lp, struct mt_err *err);
int mt_infer_check_decode(const struct mt_infer *e, int n, const int *slots, const int32_t *tokens, const int *pos,
			  struct mt_err *err);

extern const struct mt_infer_ops mt_infer_cpu;
/* infer_cuda.c: one GPU, weights, activations and cache in bf16 or in fp32, logits in
 * fp32; init refuses where the build has no CUDA or no device is visible */
extern const struct mt_infer_ops mt_infer_cuda, mt_infer_cuda_fp32;
/* the CUDA engine's key/value cache in bytes (0 for other engines) */
size_t mt_infer_cuda_cache_bytes(const struct mt_infer *e);

/* Bytes the CPU engine's key/value cache takes: layers x 2 x batch x groups x len x head
 * size x 4 (the CUDA engine's: x 2 in bf16). */
size_t mt_infer_cache_bytes(const struct mt_config *c, int max_batch, int max_len);

#endif
