/* mt19937.h: numpy's legacy RandomState stream (MT19937), for Megatron's sample order.
 *
 * Megatron shuffles its dataset indices with numpy.random.RandomState(seed).shuffle;
 * reproducing the order element for element needs the same generator, the same
 * seeding (init_genrand for an integer seed), the same bounded integers (masked
 * rejection sampling) and the same Fisher-Yates walk. Nothing else lives here. */
#ifndef MT_MT19937_H
#define MT_MT19937_H

#include <stddef.h>
#include <stdint.h>

struct mt_mt19937 {
	uint32_t key[624];
	int pos;
};

void mt_mt19937_seed(struct mt_mt19937 *r, uint32_t seed);
uint32_t mt_mt19937_next32(struct mt_mt19937 *r);
/* numpy's random_interval: uniform in [0, max] by masked rejection. */
uint64_t mt_mt19937_interval(struct mt_mt19937 *r, uint64_t max);
/* RandomState.shuffle of a 1-D array of n elements of `size` bytes (4 or 8). */
void mt_mt19937_shuffle(struct mt_mt19937 *r, void *a, size_t n, size_t size);

#endif
