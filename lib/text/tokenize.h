/* tokenize.h: the tokenization pipeline behind mt-tokenize.
 *
 * One reader thread cuts the inputs (files, archive members, stdin) into batches of
 * records (JSON lines, or text documents by line, paragraph or file); worker threads
 * parse and tokenize batches; the calling thread writes the results in input order to
 * one indexed dataset per JSON key. Batches are recycled from a fixed pool, so memory
 * is bounded by (2 x workers + 2) batches of about 256 KiB of text (plus their tokens and
 * each worker's encoder), whatever the size of the input. One record (a line, a
 * paragraph, a file) is at most max_document bytes: the reader never holds more of a
 * longer one, which is an error naming the file and line (exit 3), or with
 * skip_bad_lines skipped with a warning. A batch that grew past a few MiB for a long
 * record is shrunk when it comes back to the pool, so the peak is about
 * MT_TOK_MEM_PER_DOC x max_document per worker (docs/mt-tokenize.md). Output bytes do
 * not depend on the number of workers. */
#ifndef MT_TOKENIZE_H
#define MT_TOKENIZE_H

#include <stdint.h>

#include "base/err.h"
#include "text/pretok.h"
#include "text/vocab.h"

enum mt_tok_format {
	MT_TOK_JSON,      /* one JSON object per line; --json-keys pick the text */
	MT_TOK_TEXT_LINE, /* plain text, one document per line */
	MT_TOK_TEXT_PARA, /* plain text, documents separated by blank lines */
	MT_TOK_TEXT_FILE, /* plain text, one document per file (or archive member) */
};

#define MT_TOK_MAX_KEYS 16
#define MT_TOK_MAX_DOCUMENT (32LL << 20) /* default record cap, bytes */
#define MT_TOK_MEM_PER_DOC 8             /* stated peak bytes per byte of the cap, per worker */

struct mt_tokenize_opts {
	char **inputs;            /* paths after glob expansion; "-" is stdin */
	int ninputs;
	enum mt_tok_format format;
	const char *keys[MT_TOK_MAX_KEYS];
	int nkeys;
	const struct mt_vocab *vocab;
	const struct mt_pretok *pretok;
	int append_eod;
	int32_t eod;
	int workers;
	const char *output_prefix; /* writes {prefix}_{key}_document.bin/.idx */
	int dtype;                 /* lib/data/idx.h code */
	int skip_bad_lines;
	size_t max_document;       /* bytes of one record at most; 0: MT_TOK_MAX_DOCUMENT */
	int quiet;
	int64_t log_interval;      /* a status line every N documents; 0 for none */
	const char *prog;          /* message prefix for progress lines */
};

struct mt_tokenize_stats {
	int64_t documents;   /* records read (good ones) */
	int64_t tokens;      /* over all keys */
	int64_t text_bytes;  /* bytes of document text tokenized (JSON decoded, every key), what MB/s counts */
	int64_t bad_lines;   /* skipped with --skip-bad-lines */
	int64_t repaired;    /* invalid UTF-8 sequences or lone surrogates replaced by U+FFFD */
	int64_t empty;       /* documents with no tokens (kept, as in Megatron) */
	double seconds;
};

int mt_tokenize_run(const struct mt_tokenize_opts *o, struct mt_tokenize_stats *st,
		    struct mt_err *err);

#endif
