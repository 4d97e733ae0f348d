/* array.c: growing an array's capacity by doubling (see array.h). */
#include "base/array.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int mt_array_grow(void *pp, size_t *cap, size_t need, size_t size, size_t first)
{
	size_t c;
	void *p;

	if (need <= *cap)
		return 0;
	c = *cap ? *cap : first ? first : 1;
	while (c < need)
		c = c > SIZE_MAX / 2 ? need : c * 2;
	if (size && c > SIZE_MAX / size) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(&p, pp, sizeof(p));
	p = realloc(p, c * size);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(pp, &p, sizeof(p));
	*cap = c;
	return 0;
}
