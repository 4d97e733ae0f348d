#!/usr/bin/env python3
# Unicode normalization as Hugging Face tokenizers does it: its normalizers (NFC, NFD, NFKC,
# NFKD) use the Rust crate unicode-normalization-alignments, whose tables are Unicode 9.0, so
# a code point assigned after 9.0 is left as it is and is a starter (combining class 0).
# Reference for tests/mt-tokenize-hfjson.bats, written from that rule alone: the text is cut
# at every code point whose age (DerivedAge.txt of Debian's unicode-data) is after 9.0, the
# pieces between are normalized by Python's unicodedata (any version from 9.0 on gives the
# same for the older code points: normalization is stable), and the later code points are
# kept as they are.
#
#   unicode9-normalize.py FORM < in.jsonl > out.jsonl    the "text" of each line (a string or
#                                                        a list of strings), lone surrogates
#                                                        first made U+FFFD as mt reads them
#   env: UNICODE_DATA (default /usr/share/unicode)
import json
import os
import sys
import unicodedata


def later_code_points(root=None):
    root = root or os.environ.get("UNICODE_DATA", "/usr/share/unicode")
    later = set()
    with open(os.path.join(root, "DerivedAge.txt"), encoding="utf-8") as f:
        for ln in f:
            body = ln.split("#", 1)[0].strip()
            if not body:
                continue
            cps, age = (x.strip() for x in body.split(";"))
            a, _, b = cps.partition("..")
            if tuple(int(x) for x in age.split(".")) > (9, 0):
                later.update(range(int(a, 16), int(b or a, 16) + 1))
    return later


LATER = later_code_points()


def normalize9(form, s):
    out, piece = [], []
    for ch in s:
        if ord(ch) in LATER:
            out.append(unicodedata.normalize(form, "".join(piece)))
            out.append(ch)
            piece = []
        else:
            piece.append(ch)
    out.append(unicodedata.normalize(form, "".join(piece)))
    return "".join(out)


def main():
    form = sys.argv[1]
    if form not in ("NFC", "NFD", "NFKC", "NFKD"):
        sys.exit(f"unicode9-normalize: unknown form {form!r}")

    def norm(s):
        return normalize9(form, s.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))

    for line in sys.stdin:
        d = json.loads(line)
        t = d.get("text")
        if isinstance(t, str):
            d["text"] = norm(t)
        elif isinstance(t, list):
            d["text"] = [norm(x) if isinstance(x, str) else x for x in t]
        print(json.dumps(d))


if __name__ == "__main__":
    main()
