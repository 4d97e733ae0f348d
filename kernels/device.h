/* device.h: which CUDA devices this process can see, and what the build targets.
 * Declarations only (STYLE.md point 4); kernels/device.cu has the code. */
#ifndef MT_KERNELS_DEVICE_H
#define MT_KERNELS_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible devices; 0 when there is no driver or no device. */
int mt_cuda_device_count(void);
/* One line: compiled targets, runtime version, visible devices and their names. */
void mt_cuda_describe(char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
