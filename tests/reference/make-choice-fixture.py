#!/usr/bin/env python3
"""Multiple-choice fixtures in the datasets' own JSON forms, from the demo corpus:

    make-choice-fixture.py CORPUS.jsonl   (writes hellaswag.jsonl, piqa.jsonl, arc.jsonl,
                                           generic.jsonl in the current directory)

HellaSwag lines carry activity_label, ctx_a, ctx_b, endings and a string label, with the
bracketed markers ("[title]", "[header]", "[substeps]") and the upper case that the
task's preprocess and capitalize() rewrite; PIQA lines goal, sol1, sol2 and label; ARC
lines question, choices {text, label} (letters, or digits as some ARC items have) and
answerKey; generic lines context (some ending in a space, one empty), choices and label.
The right answer is the story's next sentence, the others sentences of other stories;
no question has two equal choices (a tie would make argmax depend on rounding). Seeded,
so every run writes the same files.
"""
import json
import random
import sys

docs = [json.loads(l)["text"] for l in open(sys.argv[1])]
rnd = random.Random(7)


def sents(t):
    return [s.strip() + "." for s in t.split(".") if s.strip()]


pool = sorted({s for d in docs[:400] for s in sents(d)})


def others(k, avoid):
    out = []
    while len(out) < k:
        s = rnd.choice(pool)
        if s not in avoid and s not in out:
            out.append(s)
    return out


with open("hellaswag.jsonl", "w") as f:
    for i, d in enumerate(docs[400:424]):
        s = sents(d)
        if len(s) < 3:
            continue
        words = s[1].split()
        half = len(words) // 2
        true = " ".join(words[half:]) + " " + s[2]
        endings = [true] + others(3, [true])
        rnd.shuffle(endings)
        f.write(json.dumps({"activity_label": "Story time" if i % 2 else "Kids [title] play",
                            "ctx_a": s[0] + (" [header] Step one" if i % 5 == 0 else ""),
                            "ctx_b": ("THE " if i % 3 == 0 else "") + " ".join(words[:half]),
                            "endings": [e + ("  [substeps] more" if k == 1 else "") for k, e in enumerate(endings)],
                            "label": str(endings.index(true))}) + "\n")
with open("piqa.jsonl", "w") as f:
    for i, d in enumerate(docs[430:450]):
        s = sents(d)
        if len(s) < 2:
            continue
        sols = [s[1]] + others(1, [s[1]])
        if i % 2:
            sols.reverse()
        f.write(json.dumps({"goal": s[0], "sol1": sols[0], "sol2": sols[1], "label": sols.index(s[1])}) + "\n")
with open("arc.jsonl", "w") as f:
    for i, d in enumerate(docs[450:470]):
        s = sents(d)
        if len(s) < 2:
            continue
        ch = [s[1]] + others(3, [s[1]])
        rnd.shuffle(ch)
        labels = ["A", "B", "C", "D"] if i % 3 else ["1", "2", "3", "4"]
        f.write(json.dumps({"id": f"q{i}", "question": s[0] + " What happens next?",
                            "choices": {"text": ch, "label": labels}, "answerKey": labels[ch.index(s[1])]}) + "\n")
with open("generic.jsonl", "w") as f:
    for i, d in enumerate(docs[470:482]):
        s = sents(d)
        if len(s) < 2:
            continue
        first = s[1].split()[0]
        ch = [first] + [w for w in ("maybe", "never", "Then") if w != first][:2]
        f.write(json.dumps({"context": "" if i == 3 else s[0] + (" " if i % 2 else ""), "choices": ch,
                            "label": 0}) + "\n")
