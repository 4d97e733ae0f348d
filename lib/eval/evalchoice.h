/* evalchoice.h: multiple-choice tasks scored as lm-evaluation-harness scores its
 * multiple_choice tasks (HellaSwag, PIQA, ARC and the like), from JSON lines to acc and
 * acc_norm.
 *
 * Each line is one question; its fields say which form it has:
 *   HellaSwag  "endings" [str], "label" (int or digit string), and either "activity_label",
 *              "ctx_a", "ctx_b" (the dataset's fields: the context is
 *              activity_label + ": " + ctx_a + " " + ctx_b.capitalize()) or "ctx"; the
 *              context and every ending pass lm-eval's hellaswag preprocess (strip,
 *              " [title]" -> ". ", drop "[...]" on one line, "  " -> " ")
 *   PIQA       "goal", "sol1", "sol2", "label": context "Question: " + goal + "\nAnswer:"
 *   ARC        "question", "choices" {"text": [str], "label": [str]}, "answerKey": context
 *              "Question: " + question + "\nAnswer:", the answer the label equal to answerKey
 *   generic    "context" (or "query"), "choices" or "endings" [str], "label" (or "gold") as
 *              given, no preprocessing
 * The continuation of choice c is " " + choices[c] (lm-eval's target_delimiter). The
 * pair is cut into tokens as lm-eval's _encode_pair does: whitespace at the end of the
 * context moves to the continuation, the whole text is encoded, and the continuation is
 * what follows the context's own tokens; an empty context is the end-of-document token.
 * A row longer than seq_length + 1 loses context from the left (lm-eval keeps the last
 * max_length + 1 tokens). The score of a choice is the sum of its tokens'
 * log-probabilities; acc takes the argmax of the sums, acc_norm the argmax of the sums
 * divided by len(choice) (Python's length of the choice text, in characters, without the
 * delimiter), the first on ties as numpy's argmax. */
#ifndef MT_EVALCHOICE_H
#define MT_EVALCHOICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "eval/evaltext.h"

struct mt_choice_result {
	int64_t examples, correct, correct_norm;
	int64_t choices;           /* rows scored */
	int64_t targets;           /* continuation tokens scored */
	int64_t truncated;         /* rows that lost context from the left */
};

/* text[0..n) as read from `name` (for messages). samples: NULL, or a stream that gets a
 * JSON line per question {"doc", "gold", "loglikelihoods", "lengths", "pred", "pred_norm"}. */
int mt_evalchoice_run(const struct mt_evaltext *x, const char *text, size_t n, const char *name, FILE *samples,
		      struct mt_choice_result *r, struct mt_err *err);

/* lm-eval's hellaswag preprocess of s[0..n) into a malloc'd string (*out, *outn). */
int mt_evalchoice_hellaswag_text(const char *s, size_t n, char **out, size_t *outn);

#endif
