/* utf8.h: making text valid UTF-8 the way the reference tokenizers do.
 *
 * Two repairs, both to U+FFFD: invalid byte sequences in raw text (Python's "replace"
 * error handler: each maximal ill-formed subpart becomes one U+FFFD), and lone UTF-16
 * surrogates written as JSON escapes ("\ud800"), which Python's json module accepts and
 * tiktoken then replaces. Nothing here tokenizes or parses JSON beyond escapes. */
#ifndef MT_UTF8_H
#define MT_UTF8_H

#include <stddef.h>

/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t mt_utf8_valid_prefix(const char *s, size_t n);

/* Copy s[0..n) to out with ill-formed sequences replaced by U+FFFD. out must hold 3*n
 * bytes. Returns the output length; *replaced counts the replacements. */
size_t mt_utf8_repair(const char *s, size_t n, char *out, size_t *replaced);

/* In a JSON text, rewrite escapes of lone surrogates ("\ud800", a high surrogate not
 * followed by a low one, a low one on its own) to "\ufffd", in place (same length).
 * Valid pairs and escaped backslashes are left alone. Returns how many were rewritten. */
size_t mt_json_fix_surrogates(char *s, size_t n);

#endif
