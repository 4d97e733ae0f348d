/* version.h: the version string and the features this build was made with. */
#ifndef MT_VERSION_H
#define MT_VERSION_H

#include <stddef.h>

const char *mt_version(void);
/* Lines "feature: detail\n" for --version (libraries, CUDA targets). */
void mt_version_features(char *buf, size_t n);

#endif
