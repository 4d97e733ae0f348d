/* utf8.h: making text valid UTF-8 the way the reference tokenizers do: invalid byte
 * sequences in raw text become U+FFFD as Python's "replace" error handler makes them
 * (each maximal ill-formed subpart one U+FFFD). Lone surrogates in JSON escapes are
 * jsontext.c's. Nothing here tokenizes or parses JSON. */
#ifndef MT_UTF8_H
#define MT_UTF8_H

#include <stddef.h>

/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t mt_utf8_valid_prefix(const char *s, size_t n);

/* Copy s[0..n) to out with ill-formed sequences replaced by U+FFFD. out must hold 3*n
 * bytes. Returns the output length; *replaced counts the replacements. */
size_t mt_utf8_repair(const char *s, size_t n, char *out, size_t *replaced);

#endif
