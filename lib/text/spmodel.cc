/* spmodel.cc: libsentencepiece behind the C interface of spmodel.h. The only C++
 * file of the library; it holds no tokenizer logic of its own. */
#include "text/spmodel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

struct mt_spmodel {
	sentencepiece::SentencePieceProcessor sp;
	int32_t size;
};

extern "C" {

struct mt_spmodel *mt_spmodel_open(const char *path, struct mt_err *err)
{
	FILE *f = fopen(path, "rb");
	struct mt_spmodel *m;

	if (!f) {
		mt_err_errno(err, MT_EXIT_IO, "cannot read tokenizer model '%s'", path);
		return NULL;
	}
	fclose(f);
	try {
		m = new mt_spmodel;
	} catch (const std::bad_alloc &) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		return NULL;
	}
	const auto st = m->sp.Load(path);
	if (!st.ok()) {
		mt_err_set(err, MT_EXIT_DATA, "tokenizer model '%s': not a SentencePiece model (%s)", path,
			   st.ToString().c_str());
		delete m;
		return NULL;
	}
	m->size = m->sp.GetPieceSize();
	return m;
}

void mt_spmodel_close(struct mt_spmodel *m)
{
	delete m;
}

int32_t mt_spmodel_size(const struct mt_spmodel *m)
{
	return m->size;
}

const char *mt_spmodel_piece(const struct mt_spmodel *m, int32_t id, size_t *len)
{
	const std::string &s = m->sp.IdToPiece(id);

	*len = s.size();
	return s.data();
}

enum mt_sp_kind mt_spmodel_kind(const struct mt_spmodel *m, int32_t id)
{
	if (m->sp.IsUnknown(id))
		return MT_SP_UNKNOWN;
	if (m->sp.IsControl(id))
		return MT_SP_CONTROL;
	if (m->sp.IsByte(id))
		return MT_SP_BYTE;
	if (m->sp.IsUnused(id))
		return MT_SP_UNUSED;
	return MT_SP_NORMAL;
}

int32_t mt_spmodel_bos(const struct mt_spmodel *m) { return m->sp.bos_id(); }
int32_t mt_spmodel_eos(const struct mt_spmodel *m) { return m->sp.eos_id(); }
int32_t mt_spmodel_pad(const struct mt_spmodel *m) { return m->sp.pad_id(); }
int32_t mt_spmodel_unk(const struct mt_spmodel *m) { return m->sp.unk_id(); }

int mt_spmodel_encode(const struct mt_spmodel *m, const char *text, size_t n, int32_t **ids,
		      size_t *nids, size_t *cap, struct mt_err *err)
{
	try {
		std::vector<int> out;
		const auto st = m->sp.Encode(absl::string_view(text, n), &out);
		if (!st.ok())
			return mt_err_set(err, MT_EXIT_DATA, "sentencepiece encode: %s", st.ToString().c_str());
		if (*nids + out.size() > *cap) {
			size_t nc = *cap ? *cap : 1024;
			while (nc < *nids + out.size())
				nc *= 2;
			int32_t *na = static_cast<int32_t *>(realloc(*ids, nc * sizeof(int32_t)));
			if (!na)
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			*ids = na;
			*cap = nc;
		}
		for (size_t i = 0; i < out.size(); i++)
			(*ids)[*nids + i] = out[i];
		*nids += out.size();
	} catch (const std::bad_alloc &) {
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	return 0;
}

int mt_spmodel_decode(const struct mt_spmodel *m, const int32_t *ids, size_t n, char **buf,
		      size_t *len, size_t *cap, struct mt_err *err)
{
	try {
		std::vector<int> in(ids, ids + n);
		std::string out;
		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0 || ids[i] >= m->size)
				return mt_err_set(err, MT_EXIT_DATA, "token id %d is not in the vocabulary", ids[i]);
		const auto st = m->sp.Decode(in, &out);
		if (!st.ok())
			return mt_err_set(err, MT_EXIT_DATA, "sentencepiece decode: %s", st.ToString().c_str());
		if (*len + out.size() + 1 > *cap) {
			size_t nc = *cap ? *cap : 4096;
			while (nc < *len + out.size() + 1)
				nc *= 2;
			char *nb = static_cast<char *>(realloc(*buf, nc));
			if (!nb)
				return mt_err_set(err, MT_EXIT_IO, "out of memory");
			*buf = nb;
			*cap = nc;
		}
		memcpy(*buf + *len, out.data(), out.size());
		*len += out.size();
		(*buf)[*len] = '\0';
	} catch (const std::bad_alloc &) {
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	return 0;
}

} /* extern "C" */
