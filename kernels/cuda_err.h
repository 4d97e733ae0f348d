/* cuda_err.h: how the CUDA launchers report failure to C callers, and the element
 * types they take. Declarations only; kernels/cuda_err.cu has the code.
 *
 * Every launcher returns 0, or -1 after recording "file:line: what failed: CUDA's
 * reason" in a per-thread buffer that mt_cuda_error() returns, so lib/ code can turn
 * it into its own struct mt_err. */
#ifndef MT_KERNELS_CUDA_ERR_H
#define MT_KERNELS_CUDA_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

/* element types of activations and compute copies of weights */
enum mt_dtype { MT_F32 = 0, MT_BF16 = 1, MT_F16 = 2 };

const char *mt_cuda_error(void);
/* record a message (printf-style); returns -1 */
int mt_cuda_fail(const char *file, int line, const char *fmt, ...);

#ifdef __cplusplus
}
#endif

#endif
