/* array.h: growing an array's capacity by doubling, for the arrays that keep their own
 * pointer, count and capacity fields.
 *
 * One function instead of the loop each file wrote: the capacity starts at `first`
 * elements (or where it is) and doubles until it holds `need`; the array is realloc'ed
 * once. Out of memory is the only failure: -1 with errno ENOMEM, the array and its
 * capacity as they were, and the caller reports it (mt_err_set(err, MT_EXIT_IO, "out of
 * memory")). Strings have their own type (strbuf.h). */
#ifndef MT_ARRAY_H
#define MT_ARRAY_H

#include <stddef.h>

/* *pp (a T **, passed as void *) holds at least need elements of size bytes afterwards;
 * *cap is its capacity in elements. 0, or -1 with nothing changed. */
int mt_array_grow(void *pp, size_t *cap, size_t need, size_t size, size_t first);

#endif
