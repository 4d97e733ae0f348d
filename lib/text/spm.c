/* spm.c: Megatron's SentencePiece tokenizer types over libsentencepiece (see spm.h). */
#include "text/spm.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

static const struct {
	const char *name;
	enum mt_spm_type type;
} names[] = {
	{ "SentencePieceTokenizer", MT_SPM_SENTENCEPIECE },
	{ "GPTSentencePieceTokenizer", MT_SPM_GPT },
	{ "Llama2Tokenizer", MT_SPM_LLAMA2 },
};

const char *mt_spm_type_name(enum mt_spm_type t)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].type == t)
			return names[i].name;
	return "?";
}

enum mt_spm_type mt_spm_type_parse(const char *name)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(names[i].name, name))
			return names[i].type;
	return 0;
}

void mt_spm_free(struct mt_spm *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nspecial; i++)
		free(s->special[i].text);
	free(s->special);
	if (s->model)
		mt_spmodel_close(s->model);
	free(s);
}

/* The id of a piece of the model, or -1 (a linear scan: used a few times at load). */
static int32_t piece_id(const struct mt_spm *s, const char *text)
{
	size_t n = strlen(text), pl;

	for (int32_t id = 0; id < s->npieces; id++) {
		const char *p = mt_spmodel_piece(s->model, id, &pl);
		if (pl == n && memcmp(p, text, n) == 0)
			return id;
	}
	return -1;
}

/* Megatron's _add_special_token: a text already in the vocabulary keeps its id, a new
 * one takes the next id; either way it becomes a special token (once). */
static int add_special(struct mt_spm *s, int32_t *next_id, const char *text, struct mt_err *err)
{
	int32_t id = piece_id(s, text);
	struct mt_spm_special *ns;

	for (int i = 0; i < s->nspecial; i++)
		if (!strcmp(s->special[i].text, text))
			return 0;
	if (id < 0)
		id = (*next_id)++;
	ns = realloc(s->special, (size_t)(s->nspecial + 1) * sizeof(*ns));
	if (!ns)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	s->special = ns;
	ns[s->nspecial].text = strdup(text);
	ns[s->nspecial].len = strlen(text);
	ns[s->nspecial].id = id;
	if (!ns[s->nspecial].text)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	s->nspecial++;
	return 0;
}

/* The piece of a special id of the model, or a fallback name where the model has none
 * (Megatron: id_to_piece raises IndexError for -1, and the fallback is used). */
static const char *piece_or(const struct mt_spm *s, int32_t id, const char *fallback, char *buf, size_t cap)
{
	size_t n;
	const char *p;

	if (id < 0 || id >= s->npieces)
		return fallback;
	p = mt_spmodel_piece(s->model, id, &n);
	if (n >= cap)
		return fallback;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return buf;
}

/* What one id shows as in streamed output (mt_gen_token_text): a piece with U+2581 as
 * a space, a byte piece its byte, control pieces nothing, <unk> as the library's
 * " \u2047 ", Megatron's added tokens their text. */
static size_t id_text(const struct mt_spm *s, int32_t id, char *out)
{
	size_t n, k = 0;
	const char *p;

	switch (mt_spmodel_kind(s->model, id)) {
	case MT_SP_CONTROL:
		return 0;
	case MT_SP_UNKNOWN:
		memcpy(out, " \xE2\x81\x87 ", 5);
		return 5;
	case MT_SP_BYTE:
		p = mt_spmodel_piece(s->model, id, &n);
		out[0] = (char)strtol(p + 3, NULL, 16); /* <0xAB> */
		return 1;
	default:
		p = mt_spmodel_piece(s->model, id, &n);
		for (size_t i = 0; i < n; i++) {
			if (i + 2 < n && (unsigned char)p[i] == 0xE2 && (unsigned char)p[i + 1] == 0x96 &&
			    (unsigned char)p[i + 2] == 0x81) {
				out[k++] = ' ';
				i += 2;
			} else {
				out[k++] = p[i];
			}
		}
		return k;
	}
}

int mt_spm_load(struct mt_vocab *v, const char *model_file, enum mt_spm_type t, struct mt_err *err)
{
	struct mt_spm *s;
	int32_t next, n;
	size_t arena = 0, k = 0;
	char buf[256];

	memset(v, 0, sizeof(*v));
	v->eod = -1;
	s = calloc(1, sizeof(*s));
	if (!s)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	s->type = t;
	s->model = mt_spmodel_open(model_file, err);
	if (!s->model)
		goto fail;
	s->npieces = next = mt_spmodel_size(s->model);
	s->bos = mt_spmodel_bos(s->model);
	s->eos = mt_spmodel_eos(s->model);
	s->pad = mt_spmodel_pad(s->model);
	if (t == MT_SPM_SENTENCEPIECE) {
		/* Megatron's order: <CLS> <SEP> <EOD> <MASK>, then the pad, bos and eos pieces */
		static const char *const fixed[] = { "<CLS>", "<SEP>", "<EOD>", "<MASK>" };
		for (int i = 0; i < 4; i++)
			if (add_special(s, &next, fixed[i], err))
				goto fail;
		if (add_special(s, &next, piece_or(s, s->pad, "<PAD>", buf, sizeof(buf)), err) ||
		    add_special(s, &next, piece_or(s, s->bos, "<BOS>", buf, sizeof(buf)), err) ||
		    add_special(s, &next, piece_or(s, s->eos, "<EOS>", buf, sizeof(buf)), err))
			goto fail;
		v->eod = s->special[2].id;
	} else {
		v->eod = s->eos;
		if (t == MT_SPM_LLAMA2 && s->bos < 0) {
			mt_err_set(err, MT_EXIT_DATA, "tokenizer model '%s' has no bos piece, which Llama2Tokenizer "
				   "puts before every text: use GPTSentencePieceTokenizer", model_file);
			goto fail;
		}
	}
	n = next;
	/* each id's text, for the tools that show tokens one at a time */
	for (int32_t id = 0; id < s->npieces; id++) {
		size_t pl;
		mt_spmodel_piece(s->model, id, &pl);
		arena += pl + 5;
	}
	for (int i = 0; i < s->nspecial; i++)
		arena += s->special[i].len;
	v->kind = MT_VOCAB_SPM;
	v->ops = &mt_spm_ops;
	v->spm = s;
	v->n = n;
	v->arena = malloc(arena + 1);
	v->off = calloc((size_t)n, sizeof(*v->off));
	v->len = calloc((size_t)n, sizeof(*v->len));
	v->special = calloc((size_t)n, 1);
	v->rank = malloc((size_t)n * sizeof(*v->rank));
	if (!v->arena || !v->off || !v->len || !v->special || !v->rank) {
		mt_vocab_free(v);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for a vocabulary of %d tokens", n);
	}
	for (int32_t id = 0; id < n; id++)
		v->rank[id] = -1;
	for (int32_t id = 0; id < s->npieces; id++) {
		v->off[id] = (int64_t)k;
		v->len[id] = (uint32_t)id_text(s, id, v->arena + k);
		v->special[id] = mt_spmodel_kind(s->model, id) == MT_SP_CONTROL;
		k += v->len[id];
	}
	for (int i = 0; i < s->nspecial; i++) {
		int32_t id = s->special[i].id;
		memcpy(v->arena + k, s->special[i].text, s->special[i].len);
		v->off[id] = (int64_t)k;
		v->len[id] = (uint32_t)s->special[i].len;
		v->special[id] = 1;
		k += s->special[i].len;
	}
	for (int i = 0; i < 256; i++)
		v->byte_id[i] = -1;
	v->vocab_size = n; /* Megatron: len(vocab), added tokens included */
	return 0;
fail:
	mt_spm_free(s);
	return -1;
}

int mt_spm_encode(const struct mt_spm *s, const char *text, size_t n, int32_t **ids, size_t *nids,
		  size_t *cap, struct mt_err *err)
{
	if (s->type == MT_SPM_LLAMA2) {
		/* Megatron's tokenize(s, bos=True, eos=False) */
		if (mt_array_grow(ids, cap, *nids + 1, sizeof(**ids), 1024))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		(*ids)[(*nids)++] = s->bos;
	}
	if (s->type != MT_SPM_SENTENCEPIECE)
		return mt_spmodel_encode(s->model, text, n, ids, nids, cap, err);
	/* SentencePieceTokenizer: the earliest special text (the first in Megatron's
	 * order on a tie) becomes its id; the text before it is encoded on its own */
	for (;;) {
		const char *best = NULL;
		int bi = -1;
		for (int i = 0; i < s->nspecial; i++) {
			const char *hit = memmem(text, n, s->special[i].text, s->special[i].len);
			if (hit && (!best || hit < best)) {
				best = hit;
				bi = i;
			}
		}
		if (!best)
			break;
		if (mt_spmodel_encode(s->model, text, (size_t)(best - text), ids, nids, cap, err))
			return -1;
		if (mt_array_grow(ids, cap, *nids + 1, sizeof(**ids), 1024))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		(*ids)[(*nids)++] = s->special[bi].id;
		n -= (size_t)(best - text) + s->special[bi].len;
		text = best + s->special[bi].len;
	}
	return mt_spmodel_encode(s->model, text, n, ids, nids, cap, err);
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, struct mt_err *err)
{
	if (mt_array_grow(buf, cap, *len + n + 1, 1, 4096))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

int mt_spm_decode(const struct mt_spm *s, const int32_t *ids, size_t n, char **buf, size_t *len,
		  size_t *cap, struct mt_err *err)
{
	size_t last = 0;

	if (s->type != MT_SPM_SENTENCEPIECE)
		return mt_spmodel_decode(s->model, ids, n, buf, len, cap, err);
	/* Megatron's detokenize: the model's text of the ids between special ones, each
	 * special id as its text with a space either side */
	for (size_t i = 0; i < n; i++) {
		int sp = -1;
		for (int j = 0; j < s->nspecial && sp < 0; j++)
			if (s->special[j].id == ids[i])
				sp = j;
		if (sp < 0)
			continue;
		if (mt_spmodel_decode(s->model, ids + last, i - last, buf, len, cap, err) ||
		    append(buf, len, cap, " ", 1, err) ||
		    append(buf, len, cap, s->special[sp].text, s->special[sp].len, err) ||
		    append(buf, len, cap, " ", 1, err))
			return -1;
		last = i + 1;
	}
	return mt_spmodel_decode(s->model, ids + last, n - last, buf, len, cap, err);
}

static int vocab_encode(const struct mt_vocab *v, const char *text, size_t n, int32_t **ids, size_t *nids,
			size_t *cap, struct mt_err *err)
{
	return mt_spm_encode(v->spm, text, n, ids, nids, cap, err);
}

static int vocab_decode(const struct mt_vocab *v, const int32_t *ids, size_t n, char **buf, size_t *len,
			size_t *cap, struct mt_err *err)
{
	return mt_spm_decode(v->spm, ids, n, buf, len, cap, err);
}

static void vocab_free(struct mt_vocab *v)
{
	mt_spm_free(v->spm);
}

const struct mt_vocab_ops mt_spm_ops = {
	.name = "SentencePiece",
	.encode = vocab_encode,
	.decode = vocab_decode,
	.free = vocab_free,
};
