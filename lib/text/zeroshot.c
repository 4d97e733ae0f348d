/* zeroshot.c: windows, word counts and cloze rows of Megatron's zero-shot tasks (see
 * zeroshot.h). */
#include "text/zeroshot.h"

#include <string.h>

/* Python's whitespace: the ASCII ones, 0x1c..0x1f, and the Unicode separators
 * (U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000). */
static int is_space_cp(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
	       c == 0x3000;
}

/* decode one UTF-8 code point at s; its length (1 for a stray byte) */
static size_t cp_at(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 1;

	if (len > n)
		len = 1;
	*cp = len == 1 ? s[0] : s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*cp = s[0];
			return 1;
		}
		*cp = (*cp << 6) | (s[i] & 0x3f);
	}
	return len;
}

size_t mt_zs_space_at(const char *s, size_t n)
{
	uint32_t c;
	size_t len;

	if (!n)
		return 0;
	len = cp_at((const unsigned char *)s, n, &c);
	return is_space_cp(c) ? len : 0;
}

size_t mt_zs_space_before(const char *s, size_t n)
{
	size_t b = n;

	if (!n)
		return 0;
	/* back to the lead byte (at most 3 continuation bytes) */
	while (b > 0 && n - b < 4 && ((unsigned char)s[b - 1] & 0xc0) == 0x80)
		b--;
	if (b == 0 || n - b >= 4)
		b = n; /* stray continuation bytes: look at the last byte alone */
	else
		b--;
	return mt_zs_space_at(s + b, n - b) == n - b ? n - b : 0;
}

void mt_zs_strip(const char *s, size_t n, size_t *beg, size_t *len)
{
	size_t b = 0, e = n, k;

	while (b < e && (k = mt_zs_space_at(s + b, e - b)))
		b += k;
	while (e > b && (k = mt_zs_space_before(s + b, e - b)))
		e -= k;
	*beg = b;
	*len = e - b;
}

int64_t mt_zs_word_count(const char *text, size_t n)
{
	size_t b, len;
	int64_t words = 1;

	mt_zs_strip(text, n, &b, &len);
	for (size_t i = 0; i < len; i++)
		words += text[b + i] == ' ';
	return words;
}

int64_t mt_zs_windows(int64_t ntok, int64_t stride)
{
	int64_t targets = ntok - 1 - stride, w;

	if (targets < 0)
		targets = 0;
	w = (targets + stride - 1) / stride + 1;
	return w < 1 ? 1 : w;
}

int64_t mt_zs_window(const int32_t *toks, int64_t ntok, int64_t L, int64_t stride, int64_t k, int32_t eod,
		     int32_t *row, uint8_t *mask)
{
	int64_t start = k * stride, have = ntok - start, counted = 0;

	if (have < 0)
		have = 0;
	if (have > L + 1)
		have = L + 1;
	for (int64_t j = 0; j <= L; j++)
		row[j] = j < have ? toks[start + j] : eod;
	for (int64_t j = 0; j < L; j++) {
		/* target j is row[j + 1]: real when j + 1 < have; later windows keep the last stride */
		int on = j + 1 < have && (k == 0 || stride == L || j >= L - stride);
		mask[j] = (uint8_t)on;
		counted += on;
	}
	return counted;
}

int mt_zs_last_word(const char *text, size_t n, size_t *ctx_beg, size_t *ctx_len, size_t *word_beg,
		    size_t *word_len)
{
	size_t e = n, b, k;

	while (e > 0 && (k = mt_zs_space_before(text, e)))
		e -= k;
	if (e == 0)
		return -1;
	b = e;
	while (b > 0 && !mt_zs_space_before(text, b)) {
		/* step back one code point */
		b--;
		while (b > 0 && ((unsigned char)text[b] & 0xc0) == 0x80)
			b--;
	}
	/* text.rfind(w): the last occurrence, which may lie later than b only if it
	 * overlaps the trailing whitespace, which it cannot: it is at b */
	*word_beg = b;
	*word_len = e - b;
	mt_zs_strip(text, b, ctx_beg, ctx_len);
	return 0;
}

int mt_zs_cloze_row(const int32_t *ctx, int64_t nctx, const int32_t *ans, int64_t nans, int64_t L, int32_t eod,
		    int32_t *row, uint8_t *mask, int64_t *dropped)
{
	int64_t skip = 0, n;

	if (nans <= 0 || nans > L)
		return -1;
	if (nctx + nans > L + 1)
		skip = nctx + nans - (L + 1);
	*dropped = skip;
	n = 0;
	for (int64_t i = skip; i < nctx; i++)
		row[n++] = ctx[i];
	for (int64_t i = 0; i < nans; i++)
		row[n++] = ans[i];
	for (int64_t j = n; j <= L; j++)
		row[j] = eod;
	/* target j is row[j + 1]: the answer occupies rows n - nans .. n - 1 */
	for (int64_t j = 0; j < L; j++)
		mask[j] = (uint8_t)(j + 1 >= n - nans && j + 1 < n);
	return 0;
}
