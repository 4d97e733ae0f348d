/* lttune.h: the matmul tuning file that MT_CUDA_MATMUL_TUNING names.
 *
 * cuBLASLt's first heuristic candidate is the default for every product. With
 * MT_CUDA_MATMUL_TUNING=FILE in the environment, the CUDA training and generation engines
 * use the picks FILE holds for this device and cuBLASLt version, and time the candidates
 * of every product that has none (kernels/matmul.h: each for MT_CUDA_MATMUL_TUNING_MS,
 * default 150, twice round, under sustained load on the product's own operands), adding the
 * winner to FILE as they go. A run that tunes spends a few seconds a product shape at its
 * start (about 40 s for the Llama-style bench model); runs after it read the picks.
 *
 * The file is text, one pick a line, fields separated by tabs:
 *   device, cuBLASLt version, A/B type, C/D type, op(A), op(B), m, n, k, lda, ldb, ldd,
 *   beta (0/1), epilogue, algorithm id, tile, stages, split-K, reduction scheme, CTA
 *   swizzling, custom option, cluster shape, the pick's sustained ms, the first
 *   candidate's, the candidates timed
 * with '#' comments. Lines of other devices or versions are kept when the file is
 * rewritten (whole, to a temporary name, then renamed: several processes tuning at once
 * lose at most each other's newest lines, never the file). A line that does not parse is an
 * error naming the file, the line and the field. */
#ifndef MT_LTTUNE_H
#define MT_LTTUNE_H

#include <stddef.h>

#include "../../kernels/matmul.h"
#include "base/err.h"

#define MT_LTTUNE_FIELDS 25

/* The picks of text's lines for ident ("<device>\t<cuBLASLt version>"), in *picks (malloc'ed,
 * *n of them; the caller frees). 0, or -1 with err naming path, the line and the field. */
int mt_lttune_parse(const char *path, const char *text, const char *ident, struct mt_lt_pick **picks, int *n,
		    struct mt_err *err);
/* p as a line for ident, with a newline: the length written, -1 when buf is too short */
int mt_lttune_line(char *buf, size_t n, const char *ident, const struct mt_lt_pick *p);
/* Reread path (missing: empty), replace or add p's line for ident, write the file whole. */
int mt_lttune_save(const char *path, const char *ident, const struct mt_lt_pick *p, struct mt_err *err);

struct mt_lt;
struct mt_lttune;
/* MT_CUDA_MATMUL_TUNING from the environment: its picks loaded into lt and tuning turned on
 * (new picks logged and saved), *t set (NULL when the variable is unset or empty). CUDA
 * builds only. */
int mt_lttune_setup(struct mt_lt *lt, struct mt_lttune **t, struct mt_err *err);
void mt_lttune_free(struct mt_lttune *t);

#endif
