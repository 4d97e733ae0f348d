/* mt19937.c: the Mersenne Twister as numpy's legacy RandomState runs it (see mt19937.h). */
#include "base/mt19937.h"

#include <string.h>

#define N 624
#define M 397

void mt_mt19937_seed(struct mt_mt19937 *r, uint32_t seed)
{
	r->key[0] = seed;
	for (int i = 1; i < N; i++)
		r->key[i] = 1812433253u * (r->key[i - 1] ^ (r->key[i - 1] >> 30)) + (uint32_t)i;
	r->pos = N;
}

static void regenerate(struct mt_mt19937 *r)
{
	static const uint32_t mag[2] = { 0, 0x9908b0dfu };
	int i;
	uint32_t y;

	for (i = 0; i < N - M; i++) {
		y = (r->key[i] & 0x80000000u) | (r->key[i + 1] & 0x7fffffffu);
		r->key[i] = r->key[i + M] ^ (y >> 1) ^ mag[y & 1];
	}
	for (; i < N - 1; i++) {
		y = (r->key[i] & 0x80000000u) | (r->key[i + 1] & 0x7fffffffu);
		r->key[i] = r->key[i + (M - N)] ^ (y >> 1) ^ mag[y & 1];
	}
	y = (r->key[N - 1] & 0x80000000u) | (r->key[0] & 0x7fffffffu);
	r->key[N - 1] = r->key[M - 1] ^ (y >> 1) ^ mag[y & 1];
	r->pos = 0;
}

uint32_t mt_mt19937_next32(struct mt_mt19937 *r)
{
	uint32_t y;

	if (r->pos == N)
		regenerate(r);
	y = r->key[r->pos++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

uint64_t mt_mt19937_interval(struct mt_mt19937 *r, uint64_t max)
{
	uint64_t mask = max, v;

	if (max == 0)
		return 0;
	mask |= mask >> 1;
	mask |= mask >> 2;
	mask |= mask >> 4;
	mask |= mask >> 8;
	mask |= mask >> 16;
	mask |= mask >> 32;
	if (max <= 0xffffffffu) {
		while ((v = (mt_mt19937_next32(r) & mask)) > max)
			;
	} else {
		do {
			uint64_t hi = mt_mt19937_next32(r);
			v = ((hi << 32) | mt_mt19937_next32(r)) & mask;
		} while (v > max);
	}
	return v;
}

void mt_mt19937_shuffle(struct mt_mt19937 *r, void *a, size_t n, size_t size)
{
	unsigned char *p = a, tmp[8];

	if (n < 2)
		return;
	for (size_t i = n - 1; i >= 1; i--) {
		size_t j = (size_t)mt_mt19937_interval(r, i);
		if (size == 4) {
			uint32_t *q = a, t = q[i];
			q[i] = q[j];
			q[j] = t;
		} else if (size == 8) {
			uint64_t *q = a, t = q[i];
			q[i] = q[j];
			q[j] = t;
		} else {
			memcpy(tmp, p + i * size, size);
			memcpy(p + i * size, p + j * size, size);
			memcpy(p + j * size, tmp, size);
		}
	}
}
