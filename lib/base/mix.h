/* mix.h: splitmix64's finalizer, the counter-based randomness of the project: a value
 * that is a function of its key only (initial weights, mock tokens, sampling), so any
 * element can be drawn without drawing the ones before it. */
#ifndef MT_MIX_H
#define MT_MIX_H

#include <stdint.h>

static inline uint64_t mt_mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

#endif
