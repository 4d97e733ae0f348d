/* spmodel.h: a SentencePiece model (tokenizer.model) through Debian's libsentencepiece.
 *
 * libsentencepiece is C++; spmodel.cc wraps the few calls mt needs behind this C
 * interface: load a model file, its pieces and their kinds, the bos/eos/pad/unk ids,
 * encode text to ids and decode ids to text exactly as the library (and so Python's
 * sentencepiece) does. A loaded model is read-only: any number of threads may encode
 * with one. Megatron's tokenizer classes on top of it (what they add, BOS, EOD) are
 * spm.c's, not this file's. */
#ifndef MT_SPMODEL_H
#define MT_SPMODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/err.h"

struct mt_spmodel;

/* The kinds of piece a model holds (SentencePiece's ModelProto piece types). */
enum mt_sp_kind {
	MT_SP_NORMAL = 1, /* text; U+2581 stands for a space */
	MT_SP_UNKNOWN,    /* <unk> */
	MT_SP_CONTROL,    /* <s>, </s>, <pad>: never produced from text, decode to nothing */
	MT_SP_BYTE,       /* <0x41>: one raw byte (byte fallback) */
	MT_SP_UNUSED,
};

/* Load a model file; NULL with err set (exit class IO when it cannot be read,
 * DATA when it is not a SentencePiece model). */
struct mt_spmodel *mt_spmodel_open(const char *path, struct mt_err *err);
void mt_spmodel_close(struct mt_spmodel *m);

int32_t mt_spmodel_size(const struct mt_spmodel *m);
/* The piece of id (as the model stores it, U+2581 for spaces) and its kind. */
const char *mt_spmodel_piece(const struct mt_spmodel *m, int32_t id, size_t *len);
enum mt_sp_kind mt_spmodel_kind(const struct mt_spmodel *m, int32_t id);
/* The special ids of the model; -1 where the model has none. */
int32_t mt_spmodel_bos(const struct mt_spmodel *m);
int32_t mt_spmodel_eos(const struct mt_spmodel *m);
int32_t mt_spmodel_pad(const struct mt_spmodel *m);
int32_t mt_spmodel_unk(const struct mt_spmodel *m);

/* Append the ids of text[0..n) to (*ids)[*nids..], growing *ids with realloc (*cap
 * its capacity). No BOS or EOS is added: that is the caller's choice. */
int mt_spmodel_encode(const struct mt_spmodel *m, const char *text, size_t n, int32_t **ids,
		      size_t *nids, size_t *cap, struct mt_err *err);
/* Append the text of ids (the library's decode: the dummy-prefix space dropped, bytes
 * joined, invalid UTF-8 as U+FFFD) to (*buf)[*len..], NUL-terminated. Every id must
 * be below mt_spmodel_size. */
int mt_spmodel_decode(const struct mt_spmodel *m, const int32_t *ids, size_t n, char **buf,
		      size_t *len, size_t *cap, struct mt_err *err);

#ifdef __cplusplus
}
#endif

#endif
