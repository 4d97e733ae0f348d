/* hfjson.h: the parts of a Hugging Face tokenizer.json around the model: normalizers and
 * post-processors.
 *
 * Normalizers run on the text before pre-tokenization: NFC, NFD, NFKC and NFKD (through
 * utf8proc), Prepend, Replace of a literal string, and a Sequence of these. The
 * post-processor's ids around a single text: TemplateProcessing's "single" template (the
 * special tokens before and after $A, as Llama 3's file adds <|begin_of_text|>),
 * BertProcessing and RobertaProcessing ([cls] text [sep]), ByteLevel (no ids) and a
 * Sequence of these. Anything else is refused by name, with the file. vocab.c reads the
 * model and pre-tokenizer; this file does not. */
#ifndef MT_HFJSON_H
#define MT_HFJSON_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "text/vocab.h"

/* Read root's "normalizer" and "post_processor" into v. */
int mt_hfjson_load(struct mt_vocab *v, json_t *root, const char *file, struct mt_err *err);
void mt_hfjson_free(struct mt_hf_extra *x);

/* The table mt_vocab_load_hf is given: load_json is mt_hfjson_load, free mt_hfjson_free. */
extern const struct mt_vocab_ops mt_hfjson_ops;

/* The normalized text of s[0..n) in *out (malloc'ed, *outn bytes); v must have steps. */
int mt_hfjson_normalize(const struct mt_vocab *v, const char *s, size_t n, char **out, size_t *outn,
			struct mt_err *err);

#endif
