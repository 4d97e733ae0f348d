/* Unit tests for lib/base/array.c: capacity doubling, contents kept, failure leaves all. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/array.h"
#include "tap.h"

static void test_array_grow(void)
{
	int64_t *a = NULL;
	size_t cap = 0, n = 0;
	int good = 1;

	is_int(mt_array_grow(&a, &cap, 1, sizeof(*a), 16), 0, "first growth");
	ok(a && cap == 16, "starts at the first capacity");
	for (int i = 0; i < 100000 && good; i++) {
		good = !mt_array_grow(&a, &cap, n + 1, sizeof(*a), 16);
		if (good)
			a[n++] = i;
	}
	ok(good, "100000 elements appended one by one");
	ok(cap >= n && cap == 131072, "capacity doubled from 16 (%zu)", cap);
	good = 1;
	for (size_t i = 0; i < n; i++)
		good &= a[i] == (int64_t)i;
	ok(good, "contents kept across reallocs");
	is_int(mt_array_grow(&a, &cap, 10, sizeof(*a), 16), 0, "a smaller need is no-op");
	is_int(cap, 131072, "capacity unchanged");
	errno = 0;
	ok(mt_array_grow(&a, &cap, SIZE_MAX / 4, sizeof(*a), 16) == -1 && errno == ENOMEM, "an impossible size fails with ENOMEM");
	ok(cap == 131072 && a[99999] == 99999, "and leaves the array as it was");
	free(a);
}

static void test_array_grow_bytes(void)
{
	char *s = NULL;
	size_t cap = 0;

	is_int(mt_array_grow(&s, &cap, 5000, 1, 4096), 0, "a need above the first capacity");
	is_int(cap, 8192, "doubles from the first until it holds the need");
	free(s);
}

int main(void)
{
	test_array_grow();
	test_array_grow_bytes();
	return tap_done();
}
