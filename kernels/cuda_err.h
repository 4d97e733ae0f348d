/* cuda_err.h: how the CUDA launchers report failure to C callers, the element types
 * they take, and the stream they launch on. Declarations only; kernels/cuda_err.cu has
 * the code.
 *
 * Every launcher returns 0, or -1 after recording "file:line: what failed: CUDA's
 * reason" in a per-thread buffer that mt_cuda_error() returns, so lib/ code can turn
 * it into its own struct mt_err.
 *
 * Every launcher (cuBLASLt calls included) queues its work on the calling thread's
 * stream: the legacy default stream unless mt_cuda_set_stream named another, so a
 * caller can put a sequence of launches on its own stream and capture it in a CUDA
 * graph (lib/infer_cuda.c's decode step).
 *
 * The decode kernels (decode_linear.h, decode_attention.h, sampling.h) can also be
 * launched as programmatic dependents (compute capability 9.0 and above): each may start
 * while the kernel before it on the stream still runs, reading only what that kernel does
 * not write (its weights) until it has waited for it inside. mt_cuda_set_pdl turns this
 * on for the calling thread's later launches of those kernels; other launchers ignore it. */
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
/* the calling thread's launch stream (a cudaStream_t; NULL: the legacy default stream) */
void mt_cuda_set_stream(void *stream);
void *mt_cuda_stream(void);
/* programmatic dependent launch of the decode kernels: 0 (the default) or 1; the
 * caller checks the device supports it */
void mt_cuda_set_pdl(int on);
int mt_cuda_pdl(void);

#ifdef __cplusplus
}
#endif

#endif
