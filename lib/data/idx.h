/* idx.h: Megatron's indexed dataset (MMIDIDX), PREFIX.bin + PREFIX.idx.
 *
 * The .bin is every token array laid end to end in one dtype, little-endian, no
 * header. The .idx is a 34-byte header (magic "MMIDIDX\0\0", u64 version 1, u8
 * dtype code, u64 S sequences, u64 D = documents + 1), then int32 lengths[S],
 * int64 pointers[S] (byte offsets into the .bin) and int64 document indices[D]
 * (sequence indices 0..S); a multimodal file adds int8 modes[S] after them.
 * Byte-compatible with megatron/core/datasets/indexed_dataset.py.
 *
 * The writer streams: tokens go straight to the .bin, lengths and document
 * indices to temporary spill files, so memory does not grow with the dataset;
 * commit assembles the .idx and renames both files into place. The reader maps
 * both files read-only and validates every length, pointer and document index
 * against the .bin size at open (mt_idx_verify, a vectorized O(S+D) pass), so
 * the accessors cannot reach outside the maps. Sample building and blending live
 * elsewhere (gptsamples.c, blend.c). All counts and offsets are 64-bit. */
#ifndef MT_IDX_H
#define MT_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* dtype codes exactly as Megatron (indexed_dataset.py DType). */
enum mt_idx_dtype {
	MT_IDX_U8 = 1,
	MT_IDX_I8 = 2,
	MT_IDX_I16 = 3,
	MT_IDX_I32 = 4,
	MT_IDX_I64 = 5,
	MT_IDX_F64 = 6,
	MT_IDX_F32 = 7,
	MT_IDX_U16 = 8,
};

#define MT_IDX_HEADER_SIZE 34

/* Bytes per element, 0 if the code is unknown. */
int mt_idx_dtype_size(int code);
/* numpy's name ("uint16", "int32", ...), NULL if the code is unknown. */
const char *mt_idx_dtype_name(int code);
/* Megatron's optimal_dtype: MT_IDX_U16 if vocab_size < 65500, else MT_IDX_I32. */
int mt_idx_dtype_for_vocab(int64_t vocab_size);

/* Writer ------------------------------------------------------------------ */

struct mt_idx_writer;

/* Begin PREFIX.bin and PREFIX.idx (the prefix is taken as given). Nothing
 * appears under those names until commit: the .bin is written to
 * PREFIX.bin.tmp.<pid>, lengths and document indices are spilled to
 * PREFIX.idx.lens.tmp.<pid> and PREFIX.idx.docs.tmp.<pid> (all registered for
 * mt_atomic_unlink_all). An output directory that does not exist is an
 * MT_EXIT_IO error naming it; an unknown dtype is MT_EXIT_DATA. */
int mt_idx_writer_open(struct mt_idx_writer **w, const char *prefix, int dtype, struct mt_err *err);
/* Append one document of nseq sequences of lengths lens[0..nseq-1] (each >= 0)
 * whose tokens, end to end, are tokens[0..sum(lens)-1], converted to the
 * writer's dtype. A value the dtype cannot hold exactly is MT_EXIT_DATA naming
 * it. nseq may be 0: an empty document adds no sequence but appends the running
 * sequence count to the document index (a repeated index, as Megatron does).
 * A document rejected for its data (bad value or length) leaves nothing behind
 * and the writer usable; after an I/O error the writer only aborts. */
int mt_idx_writer_add_document(struct mt_idx_writer *w, const int32_t *tokens, const int32_t *lens,
			       int nseq, struct mt_err *err);
/* As mt_idx_writer_add_document, with the tokens already little-endian bytes in
 * the writer's dtype: nbytes must equal sum(lens) * itemsize. */
int mt_idx_writer_add_document_raw(struct mt_idx_writer *w, const void *data, size_t nbytes,
				   const int32_t *lens, int nseq, struct mt_err *err);
struct mt_idx;
/* Append a whole opened dataset, as Megatron's add_index: the dtypes must match
 * (else MT_EXIT_DATA); its .bin is copied as raw bytes, its lengths appended and
 * its document indices 1..D-1 appended shifted by the current sequence count.
 * The copy goes in chunks; holes the filesystem reports in a sparse .bin
 * (SEEK_HOLE) stay holes in the output instead of being read and written as
 * zeros. The caller should have run mt_idx_verify on ix. */
int mt_idx_writer_add_index(struct mt_idx_writer *w, const struct mt_idx *ix, struct mt_err *err);
/* Have mt_idx_writer_add_index call fn(ctx, bytes) as it copies a .bin, bytes
 * being that .bin's bytes done so far (holes included); fn NULL turns it off. */
void mt_idx_writer_set_progress(struct mt_idx_writer *w, void (*fn)(void *ctx, int64_t bytes), void *ctx);
/* Many documents at once: data holds their tokens already in the writer's dtype
 * (little-endian), lens[0..nlens) every sequence's length, nseq[0..ndocs) each
 * document's number of sequences. The same files as adding them one by one, with a
 * few large writes: for producers (mt-tokenize's workers) that convert in parallel. */
int mt_idx_writer_add_batch(struct mt_idx_writer *w, const void *data, size_t nbytes,
			    const int32_t *lens, size_t nlens, const int32_t *nseq, size_t ndocs,
			    struct mt_err *err);
int64_t mt_idx_writer_sequences(const struct mt_idx_writer *w);
/* Documents added (not counting the leading 0 of the document index). */
int64_t mt_idx_writer_documents(const struct mt_idx_writer *w);
int64_t mt_idx_writer_tokens(const struct mt_idx_writer *w);
/* Write the .idx and fsync it, then replace the dataset in an order a reader can
 * tell apart: remove an existing PREFIX.idx, rename the .bin into place, rename
 * the .idx into place (the directory synced after each). Killed at any point, a
 * reader finds the old pair, the new pair, or no .idx (MT_EXIT_IO, "missing"),
 * never an .idx beside a .bin it does not describe. w is freed whatever the
 * outcome; on failure every temporary is removed. */
int mt_idx_writer_commit(struct mt_idx_writer *w, struct mt_err *err);
/* Remove the temporaries and free w. NULL is allowed. */
void mt_idx_writer_abort(struct mt_idx_writer *w);

/* Reader ------------------------------------------------------------------ */

/* An opened dataset, both files mapped read-only. */
struct mt_idx {
	char *prefix;     /* without ".bin"/".idx" */
	char *idx_path;
	char *bin_path;
	int dtype;
	int itemsize;
	int64_t nseq;     /* S */
	int64_t ndoc_idx; /* D = documents + 1 */
	const unsigned char *idx_map;
	size_t idx_size;
	const unsigned char *bin_map; /* never NULL, even for an empty .bin */
	size_t bin_size;
	/* arrays inside idx_map; may be unaligned: read them with the accessors */
	size_t off_lens, off_ptrs, off_docs;
	/* the mapped .bin's identity, so that a later look at the file by name
	 * (holes for a sparse copy) can tell it is still the same file */
	uint64_t bin_dev, bin_ino;
};

/* Open PREFIX.idx and PREFIX.bin (a trailing ".bin" or ".idx" on prefix is
 * dropped). Checks the magic, version 1, a known dtype, D >= 1, an .idx of at
 * least 34+12S+8D bytes (more is allowed: a multimodal modes array), the .bin
 * size against the last pointer and length, doc_idx[D-1] == S, then every entry
 * (mt_idx_verify). Bad data is MT_EXIT_DATA with a message naming the file and
 * the field ("'x.idx': sequence 7 has negative length -1"); a name that is
 * missing, unreadable or not a regular file (a directory, a FIFO: refused
 * without waiting) is MT_EXIT_IO. */
int mt_idx_open(struct mt_idx **ix, const char *prefix, struct mt_err *err);
/* mt_idx_open without the O(S+D) pass: header and sizes only. The accessors are
 * safe only on entries the caller has checked; for tests of the 64-bit header
 * arithmetic on sparse files of many GB, which the full pass would read whole. */
int mt_idx_open_header(struct mt_idx **ix, const char *prefix, struct mt_err *err);
/* NULL is allowed. */
void mt_idx_close(struct mt_idx *ix);
/* Every entry, in one pass over the index (mt_idx_open runs it): lengths >= 0,
 * pointers contiguous from 0 (p[i+1] == p[i] + len[i]*itemsize) ending at the
 * .bin size, the document index starting at 0 and never decreasing.
 * MT_EXIT_DATA on the first inconsistency, naming the file and the entry.
 * Cost: docs/perf.md ("Opening a dataset"). */
int mt_idx_verify(const struct mt_idx *ix, struct mt_err *err);

/* Accessors: no bounds checks; i in [0, S) (mt_idx_doc: [0, D)), j below the
 * sequence's length: after mt_idx_open every such access lies inside the maps. */
int32_t mt_idx_seq_len(const struct mt_idx *ix, int64_t i);
int64_t mt_idx_seq_ptr(const struct mt_idx *ix, int64_t i); /* byte offset into the .bin */
int64_t mt_idx_doc(const struct mt_idx *ix, int64_t i);
/* Pointer into the .bin map: little-endian elements of the dataset's dtype. */
const void *mt_idx_seq_data(const struct mt_idx *ix, int64_t i);
/* Token j of sequence i as int64, whatever the dtype (floats truncated). */
int64_t mt_idx_token(const struct mt_idx *ix, int64_t i, int64_t j);

#endif
