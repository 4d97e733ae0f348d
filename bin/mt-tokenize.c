/* mt-tokenize: raw text to token ids in Megatron-compatible indexed datasets; also
 * decodes ids back to text and learns a byte-level BPE vocabulary from a corpus. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/bpe.h"
#include "text/bpetrain.h"
#include "data/idx.h"
#include "base/input.h"
#include "base/log.h"
#include "base/progress.h"
#include "text/tokenize.h"
#include "text/tokenizer.h"
#include "tool.h"

static const char *const synopsis[] = {
	"[encode] --input FILE... --output-prefix PREFIX --tokenizer-type TYPE [--json-keys KEY...] [--append-eod] [--workers N]",
	"decode --tokenizer-type TYPE [--dataset PREFIX [--docs A:B]] [IDS...]",
	"train --input FILE... --vocab-size N --output-prefix PREFIX [--json-keys KEY]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-tokenize",
	.summary = "turn raw text into token ids in Megatron-compatible indexed datasets",
	.synopsis = synopsis,
	.description =
		"encode (the default) reads JSON lines or plain text, compressed or archived or on stdin,\n"
		"and writes {prefix}_{key}_document.bin/.idx; decode turns ids back into text; train learns\n"
		"a byte-level BPE vocabulary (GPT-2's vocab.json + merges.txt) from a corpus",
	.doc = "docs/mt-tokenize.md",
};

enum {
	O_INPUT = 256, O_FORMAT, O_TEXT_SPLIT, O_KEYS, O_TYPE, O_VOCAB, O_MERGES, O_MODEL, O_PATTERN,
	O_VOCAB_SIZE, O_EOD, O_EOD_ID, O_OUTPUT, O_WORKERS, O_PARTITIONS, O_LOG, O_SKIP, O_MAX_DOC, O_IMPL,
	O_SPLIT_SENT, O_KEEP_NL, O_KEEP_SEQ, O_DATASET, O_DOCS, O_MIN_FREQ,
};

#define TOKENIZER_OPTIONS                                                                                      \
	{ "tokenizer-type", 0, MT_ARG_REQUIRED, O_TYPE, "TYPE",                                                \
	  "GPT2BPETokenizer, TikTokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, "                      \
	  "GPTSentencePieceTokenizer, Llama2Tokenizer or NullTokenizer" },                                       \
	{ "vocab-file", 0, MT_ARG_REQUIRED, O_VOCAB, "FILE", "GPT-2 vocab.json" },                             \
	{ "merge-file", 0, MT_ARG_REQUIRED, O_MERGES, "FILE", "GPT-2 merges.txt" },                            \
	{ "tokenizer-model", 0, MT_ARG_REQUIRED, O_MODEL, "FILE",                                                   \
	  "tiktoken rank file, tokenizer.json or SentencePiece tokenizer.model" },                              \
	{ "tiktoken-pattern", 0, MT_ARG_REQUIRED, O_PATTERN, "PAT",                                            \
	  "pre-tokenization: gpt2, cl100k, o200k or a regex (default: the tokenizer's own)" },                 \
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB_SIZE, "N", "NullTokenizer's vocabulary size" }

static const struct mt_option encode_opts[] = {
	{ "input", 0, MT_ARG_LIST, O_INPUT, "FILE", "inputs in order: files, globs, - for stdin; any compression or archive" },
	{ "input-format", 0, MT_ARG_REQUIRED, O_FORMAT, "FMT", "json (JSON lines, the default) or text" },
	{ "text-split", 0, MT_ARG_REQUIRED, O_TEXT_SPLIT, "UNIT", "text documents: line (default), paragraph or file" },
	{ "json-keys", 0, MT_ARG_LIST, O_KEYS, "KEY", "keys to tokenize, one output dataset each (default: text)" },
	TOKENIZER_OPTIONS,
	{ "append-eod", 0, MT_ARG_NONE, O_EOD, NULL, "end every non-empty document with the end-of-document token" },
	{ "eod-id", 0, MT_ARG_REQUIRED, O_EOD_ID, "ID", "the end-of-document id (default: the tokenizer's)" },
	{ "output-prefix", 0, MT_ARG_REQUIRED, O_OUTPUT, "PREFIX", "write PREFIX_{key}_document.bin/.idx" },
	{ "workers", 0, MT_ARG_REQUIRED, O_WORKERS, "N", "tokenizer threads (default: the number of CPUs)" },
	{ "skip-bad-lines", 0, MT_ARG_NONE, O_SKIP, NULL, "skip and count malformed records instead of stopping" },
	{ "max-document-bytes", 0, MT_ARG_REQUIRED, O_MAX_DOC, "N", "longest record (line, paragraph, file) read; longer is an error (default 33554432)" },
	{ "log-interval", 0, MT_ARG_REQUIRED, O_LOG, "N", "a status line every N documents (default: none)" },
	{ "partitions", 0, MT_ARG_REQUIRED, O_PARTITIONS, "N", "accepted for Megatron scripts; threads do this work" },
	{ "dataset-impl", 0, MT_ARG_REQUIRED, O_IMPL, "IMPL", "accepted for Megatron scripts; only mmap" },
	{ "split-sentences", 0, MT_ARG_NONE, O_SPLIT_SENT, NULL, "not supported: give pre-split documents as JSON lists" },
	{ "keep-newlines", 0, MT_ARG_NONE, O_KEEP_NL, NULL, "accepted for Megatron scripts; no effect" },
	{ "keep-sequential-samples", 0, MT_ARG_NONE, O_KEEP_SEQ, NULL, "accepted; output is always in input order" },
	{ 0 },
};

static const struct mt_option decode_opts[] = {
	TOKENIZER_OPTIONS,
	{ "dataset", 0, MT_ARG_REQUIRED, O_DATASET, "PREFIX", "decode the documents of an indexed dataset" },
	{ "docs", 0, MT_ARG_REQUIRED, O_DOCS, "A:B", "only documents A to B-1 of --dataset" },
	{ 0 },
};

static const struct mt_option train_opts[] = {
	{ "input", 0, MT_ARG_LIST, O_INPUT, "FILE", "training text: files, globs, - for stdin" },
	{ "input-format", 0, MT_ARG_REQUIRED, O_FORMAT, "FMT", "json (JSON lines, the default) or text" },
	{ "json-keys", 0, MT_ARG_LIST, O_KEYS, "KEY", "keys holding the text (default: text)" },
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB_SIZE, "N", "tokens in the result, <|endoftext|> included" },
	{ "tiktoken-pattern", 0, MT_ARG_REQUIRED, O_PATTERN, "PAT", "pre-tokenization pattern (default: gpt2)" },
	{ "min-frequency", 0, MT_ARG_REQUIRED, O_MIN_FREQ, "N", "stop when the best pair is seen fewer times (default 2)" },
	{ "output-prefix", 0, MT_ARG_REQUIRED, O_OUTPUT, "PREFIX", "write PREFIX-vocab.json and PREFIX-merges.txt" },
	{ 0 },
};

struct args {
	const char *inputs[256];
	int ninputs;
	const char *keys[MT_TOK_MAX_KEYS];
	int nkeys;
	const char *format, *text_split, *output, *dataset, *docs;
	struct mt_tokenizer_args tok;
	int append_eod, skip_bad;
	long long max_doc;
	long long eod_id, workers, log_interval, min_freq;
	const char *ids[4096];
	int nids;
};

static void parse(struct mt_opt *o, struct args *a, int first_positional_ok)
{
	int id;

	while ((id = mt_opt_next(o)) != MT_OPT_END) {
		long long v;
		mt_tool_common(o, id);
		switch (id) {
		case MT_OPT_ARG:
			if (!first_positional_ok || a->nids >= (int)(sizeof(a->ids) / sizeof(a->ids[0])))
				mt_die_usage(o, "unexpected argument '%s'", o->arg);
			a->ids[a->nids++] = o->arg;
			break;
		case O_INPUT:
			for (int i = 0; i < o->nlist && a->ninputs < 256; i++)
				a->inputs[a->ninputs++] = o->list[i];
			break;
		case O_KEYS:
			if (o->nlist > MT_TOK_MAX_KEYS)
				mt_die_usage(o, "at most %d --json-keys", MT_TOK_MAX_KEYS);
			a->nkeys = o->nlist;
			for (int i = 0; i < o->nlist; i++)
				a->keys[i] = o->list[i];
			break;
		case O_FORMAT: a->format = o->arg; break;
		case O_TEXT_SPLIT: a->text_split = o->arg; break;
		case O_TYPE: a->tok.type = o->arg; break;
		case O_VOCAB: a->tok.vocab_file = o->arg; break;
		case O_MERGES: a->tok.merge_file = o->arg; break;
		case O_MODEL: a->tok.tokenizer_model = o->arg; break;
		case O_PATTERN: a->tok.pattern = o->arg; break;
		case O_VOCAB_SIZE:
			if (mt_opt_long(o, 1, INT32_MAX - 1, &v))
				mt_die_usage(o, "%s", o->err.msg);
			a->tok.vocab_size = v;
			break;
		case O_EOD: a->append_eod = 1; break;
		case O_EOD_ID:
			if (mt_opt_long(o, 0, INT32_MAX - 1, &a->eod_id))
				mt_die_usage(o, "%s", o->err.msg);
			break;
		case O_OUTPUT: a->output = o->arg; break;
		case O_WORKERS:
			if (mt_opt_long(o, 1, 1024, &a->workers))
				mt_die_usage(o, "%s", o->err.msg);
			break;
		case O_LOG:
			if (mt_opt_long(o, 0, INT64_MAX, &a->log_interval))
				mt_die_usage(o, "%s", o->err.msg);
			break;
		case O_MIN_FREQ:
			if (mt_opt_long(o, 1, INT32_MAX, &a->min_freq))
				mt_die_usage(o, "%s", o->err.msg);
			break;
		case O_SKIP: a->skip_bad = 1; break;
		case O_MAX_DOC: a->max_doc = mt_tool_num(o, 1024, 1LL << 40); break;
		case O_PARTITIONS:
			if (mt_opt_long(o, 1, 1024, &v))
				mt_die_usage(o, "%s", o->err.msg);
			break;
		case O_IMPL:
			if (strcmp(o->arg, "mmap") != 0)
				mt_die_usage(o, "--dataset-impl '%s' is not supported: only mmap", o->arg);
			break;
		case O_SPLIT_SENT:
			mt_die_usage(o, "--split-sentences is not supported: give pre-split documents as JSON lists of strings");
		case O_KEEP_NL:
		case O_KEEP_SEQ:
			break;
		case O_DATASET: a->dataset = o->arg; break;
		case O_DOCS: a->docs = o->arg; break;
		}
	}
}

static void load_tokenizer(struct mt_tokenizer *t, const struct args *a)
{
	struct mt_err e = { 0 };

	if (mt_tokenizer_load(t, &a->tok, &e))
		mt_die_err(&e);
}

static char **expand_inputs(struct mt_opt *o, const struct args *a, int *n)
{
	struct mt_err e = { 0 };
	char **paths;

	if (a->ninputs == 0)
		mt_die_usage(o, "--input is required");
	if (mt_input_expand(a->inputs, a->ninputs, &paths, n, &e))
		mt_die_err(&e);
	return paths;
}

static int cmd_encode(struct mt_opt *o, struct args *a)
{
	struct mt_tokenizer t;
	struct mt_tokenize_opts to = { 0 };
	struct mt_tokenize_stats st;
	struct mt_err e = { 0 };
	char rate[32], bytes[32];

	parse(o, a, 0);
	if (!a->output)
		mt_die_usage(o, "--output-prefix is required");
	to.inputs = expand_inputs(o, a, &to.ninputs);
	if (!a->format || strcmp(a->format, "json") == 0) {
		to.format = MT_TOK_JSON;
		if (a->text_split)
			mt_die_usage(o, "--text-split goes with --input-format text");
	} else if (strcmp(a->format, "text") == 0) {
		if (!a->text_split || strcmp(a->text_split, "line") == 0)
			to.format = MT_TOK_TEXT_LINE;
		else if (strcmp(a->text_split, "paragraph") == 0)
			to.format = MT_TOK_TEXT_PARA;
		else if (strcmp(a->text_split, "file") == 0)
			to.format = MT_TOK_TEXT_FILE;
		else
			mt_die_usage(o, "--text-split must be line, paragraph or file, not '%s'", a->text_split);
		if (a->nkeys)
			mt_die_usage(o, "--json-keys goes with --input-format json");
	} else {
		mt_die_usage(o, "--input-format must be json or text, not '%s'", a->format);
	}
	to.nkeys = a->nkeys ? a->nkeys : 1;
	for (int i = 0; i < to.nkeys; i++)
		to.keys[i] = a->nkeys ? a->keys[i] : "text";
	load_tokenizer(&t, a);
	to.vocab = &t.vocab;
	to.pretok = &t.pretok;
	to.append_eod = a->append_eod;
	to.eod = a->eod_id >= 0 ? (int32_t)a->eod_id : t.vocab.eod;
	if (to.append_eod && to.eod < 0)
		mt_die(MT_EXIT_USAGE, "--append-eod: this tokenizer has no end-of-document token; give --eod-id");
	if (to.eod >= 0 && a->eod_id >= 0 && to.eod >= t.vocab.n && t.vocab.kind != MT_VOCAB_NULL)
		mt_die(MT_EXIT_USAGE, "--eod-id %d is outside the vocabulary (%d tokens)", to.eod, t.vocab.n);
	to.workers = a->workers > 0 ? (int)a->workers : (int)sysconf(_SC_NPROCESSORS_ONLN);
	to.output_prefix = a->output;
	to.dtype = mt_idx_dtype_for_vocab(t.vocab.vocab_size);
	to.skip_bad_lines = a->skip_bad;
	to.max_document = (size_t)a->max_doc;
	to.quiet = o->quiet;
	to.log_interval = a->log_interval;
	to.prog = info.name;
	if (mt_tokenize_run(&to, &st, &e))
		mt_die_err(&e);
	mt_fmt_bytes(bytes, sizeof(bytes), (double)st.text_bytes);
	mt_fmt_bytes(rate, sizeof(rate), (double)st.text_bytes / (st.seconds > 0 ? st.seconds : 1e-9));
	mt_info("%lld documents, %lld tokens, %s of text in %.2f s (%s/s), %d worker%s, %s; "
		"%lld empty, %lld skipped, %lld replaced with U+FFFD; wrote %s_%s_document%s.{bin,idx}",
		(long long)st.documents, (long long)st.tokens, bytes, st.seconds, rate, to.workers,
		to.workers == 1 ? "" : "s", mt_idx_dtype_name(to.dtype), (long long)st.empty,
		(long long)st.bad_lines, (long long)st.repaired, a->output, to.keys[0],
		to.nkeys > 1 ? " (and the other keys)" : "");
	mt_input_paths_free(to.inputs);
	mt_tokenizer_free(&t);
	return 0;
}

static void write_or_die(const char *s, size_t n)
{
	if (n && fwrite(s, 1, n, stdout) != n)
		mt_die(MT_EXIT_IO, "cannot write to stdout");
}

/* Decode ids given as arguments, or lines of ids on stdin, or documents of a dataset. */
static int cmd_decode(struct mt_opt *o, struct args *a)
{
	struct mt_tokenizer t;
	struct mt_err e = { 0 };
	struct mt_ids ids = { 0 };
	char *buf = NULL;
	size_t len = 0, cap = 0;

	parse(o, a, 1);
	load_tokenizer(&t, a);
	if (a->dataset) {
		struct mt_idx *ix;
		long long from = 0, to = -1;

		if (a->nids)
			mt_die_usage(o, "give either --dataset or ids, not both");
		if (mt_idx_open(&ix, a->dataset, &e) || mt_idx_verify(ix, &e))
			mt_die_err(&e);
		if (a->docs) {
			const char *colon = strchr(a->docs, ':');
			char lo[32] = "";
			if (!colon || (size_t)(colon - a->docs) >= sizeof(lo))
				mt_die_usage(o, "--docs wants A:B, not '%s'", a->docs);
			memcpy(lo, a->docs, (size_t)(colon - a->docs));
			if ((lo[0] && mt_parse_ll(lo, &from)) || (colon[1] && mt_parse_ll(colon + 1, &to)))
				mt_die_usage(o, "--docs wants A:B, not '%s'", a->docs);
		}
		if (to < 0 || to > ix->ndoc_idx - 1)
			to = ix->ndoc_idx - 1;
		for (long long d = from < 0 ? 0 : from; d < to; d++) {
			len = 0;
			for (int64_t s = mt_idx_doc(ix, d); s < mt_idx_doc(ix, d + 1); s++) {
				int32_t n = mt_idx_seq_len(ix, s);
				ids.n = 0;
				for (int32_t j = 0; j < n; j++)
					if (mt_ids_push(&ids, (int32_t)mt_idx_token(ix, s, j)))
						mt_die(MT_EXIT_IO, "out of memory");
				if (mt_bpe_decode(&t.vocab, ids.a, ids.n, &buf, &len, &cap, &e))
					mt_die(MT_EXIT_DATA, "'%s' document %lld: %s", a->dataset, d, e.msg);
			}
			write_or_die(buf, len);
			write_or_die("\n", 1);
		}
		mt_idx_close(ix);
	} else if (a->nids) {
		for (int i = 0; i < a->nids; i++) {
			long long v;
			if (mt_parse_ll(a->ids[i], &v) || v < 0 || v > INT32_MAX)
				mt_die_usage(o, "'%s' is not a token id", a->ids[i]);
			mt_ids_push(&ids, (int32_t)v);
		}
		if (mt_bpe_decode(&t.vocab, ids.a, ids.n, &buf, &len, &cap, &e))
			mt_die_err(&e);
		write_or_die(buf, len);
		write_or_die("\n", 1);
	} else {
		struct mt_input *in;
		char *line;
		size_t n;
		int64_t lineno = 0;
		int r;

		if (mt_input_open(&in, "-", &e) || mt_input_next(in, &e) < 0)
			mt_die_err(&e);
		while ((r = mt_input_getline(in, &line, &n, &e)) == 1) {
			char *p = line, *end;
			lineno++;
			ids.n = 0;
			len = 0;
			for (;;) {
				long long v;
				while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r')
					p++;
				if (!*p)
					break;
				v = strtoll(p, &end, 10);
				if (end == p || v < 0 || v > INT32_MAX)
					mt_die(MT_EXIT_DATA, "<stdin>:%lld: '%.20s' is not a token id", (long long)lineno, p);
				mt_ids_push(&ids, (int32_t)v);
				p = end;
			}
			if (mt_bpe_decode(&t.vocab, ids.a, ids.n, &buf, &len, &cap, &e))
				mt_die(MT_EXIT_DATA, "<stdin>:%lld: %s", (long long)lineno, e.msg);
			write_or_die(buf, len);
			write_or_die("\n", 1);
		}
		if (r < 0)
			mt_die_err(&e);
		mt_input_close(in);
	}
	if (fflush(stdout))
		mt_die(MT_EXIT_IO, "cannot write to stdout");
	free(buf);
	mt_ids_free(&ids);
	mt_tokenizer_free(&t);
	return 0;
}

static int cmd_train(struct mt_opt *o, struct args *a)
{
	struct mt_bpetrain_opts to = { 0 };
	struct mt_bpetrain_stats st;
	struct mt_err e = { 0 };

	parse(o, a, 0);
	if (!a->output)
		mt_die_usage(o, "--output-prefix is required");
	if (a->tok.vocab_size < 257)
		mt_die_usage(o, "--vocab-size is required and must be at least 257 (256 bytes and <|endoftext|>)");
	to.inputs = expand_inputs(o, a, &to.ninputs);
	if (a->format && strcmp(a->format, "text") == 0)
		to.text = 1;
	else if (a->format && strcmp(a->format, "json") != 0)
		mt_die_usage(o, "--input-format must be json or text, not '%s'", a->format);
	to.key = a->nkeys ? a->keys[0] : "text";
	to.vocab_size = a->tok.vocab_size;
	to.pattern = a->tok.pattern ? a->tok.pattern : "gpt2";
	to.min_frequency = a->min_freq > 0 ? a->min_freq : 2;
	to.output_prefix = a->output;
	to.quiet = o->quiet;
	if (mt_bpetrain_run(&to, &st, &e))
		mt_die_err(&e);
	mt_info("learned %lld merges from %lld documents (%lld distinct pieces) in %.2f s; wrote %s-vocab.json and %s-merges.txt",
		(long long)st.merges, (long long)st.documents, (long long)st.pieces, st.seconds, a->output, a->output);
	mt_input_paths_free(to.inputs);
	return 0;
}

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct args a;
	const struct mt_option *opts = encode_opts;
	int (*cmd)(struct mt_opt *, struct args *) = cmd_encode;

	mt_tool_start(&info);
	mt_tool_command_first(argc, argv, (const char *const[]){ "encode", "decode", "train", NULL });
	memset(&a, 0, sizeof(a));
	a.eod_id = -1;
	if (argc > 1 && argv[1][0] != '-') {
		if (strcmp(argv[1], "encode") == 0) {
		} else if (strcmp(argv[1], "decode") == 0) {
			opts = decode_opts;
			cmd = cmd_decode;
		} else if (strcmp(argv[1], "train") == 0) {
			opts = train_opts;
			cmd = cmd_train;
		} else {
			mt_opt_init(&o, &info, opts, argc, argv);
			mt_die_usage(&o, "unknown command '%s' (encode, decode or train)", argv[1]);
		}
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	if (mt_opt_init(&o, &info, opts, argc, argv))
		mt_die_err(&o.err);
	return cmd(&o, &a);
}
