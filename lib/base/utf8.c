/* utf8.c: UTF-8 validation and repair (see utf8.h). Follows the well-formed byte
 * sequences of Unicode's Table 3-7, so overlongs, surrogates and code points above
 * U+10FFFF are ill-formed. */
#include "base/utf8.h"

#include <string.h>

/* Length of the well-formed sequence at s (1..4), or 0 with *bad set to the length of
 * the maximal ill-formed subpart (at least 1). */
static size_t seq_len(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*bad = 1;
		return 0;
	}
	for (i = 1; i < need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need;
}

size_t mt_utf8_valid_prefix(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, bad;

	while (i < n) {
		size_t k;
		/* skip ASCII 8 bytes at a time */
		while (i + 8 <= n) {
			unsigned long long w;
			memcpy(&w, u + i, 8);
			if (w & 0x8080808080808080ull)
				break;
			i += 8;
		}
		if (i >= n)
			break;
		k = seq_len(u + i, n - i, &bad);
		if (!k)
			return i;
		i += k;
	}
	return n;
}

size_t mt_utf8_repair(const char *s, size_t n, char *out, size_t *replaced)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, k = 0, bad;

	*replaced = 0;
	while (i < n) {
		size_t len = seq_len(u + i, n - i, &bad);
		if (len) {
			memcpy(out + k, s + i, len);
			k += len;
			i += len;
		} else {
			memcpy(out + k, "\xEF\xBF\xBD", 3);
			k += 3;
			i += bad;
			(*replaced)++;
		}
	}
	return k;
}
