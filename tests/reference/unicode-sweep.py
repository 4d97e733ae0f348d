#!/usr/bin/env python3
# Texts for checking Unicode normalizers against Hugging Face tokenizers' Unicode 9.0 tables
# (tests/mt-tokenize-hfjson.bats, hf_tokenizer_check.sh), as JSON lines {"text": ...}: a few
# cases, then every code point assigned after Unicode 9.0 (DerivedAge.txt, see
# unicode9-normalize.py) and every older one that normalization changes or moves, each
# alone and between marks ("a" U+0316 c U+0301 c), 256 to a line.
import json
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
LATER = __import__("unicode9-normalize").LATER

# U+32FF (12.1) next to U+337B (1.1) and ﬁ; U+1DFA (14.0, class 218), U+1DF6 (10.0, 232)
# and U+1DF9 (10.0, 220) among older marks; the Dives Akuru pair U+11935 U+11930 (13.0)
# and their composite U+11938; Hangul on both sides of U+32FF; compatibility characters
# of Unicode 12 to 15 before marks
CASES = ["\u337b\u32ff\ufb01", "\u32ff", "e\u0301\u1dfa\u0323", "a\u0316\u1df6\u0301x", "e\u1df9\u0301\u0323",
         "\u1e0b\u0323\u1dfa\u0307\ufb01\u00c5", "\U00011935\U00011930 \U00011938",
         "\u1100\u1161\u11a8\u32ff\uac00\u11a8", "\u2460\U0001f16c\ua7f2 plain ascii",
         "\U0001e030\u0301\U000107ba\u0308\u0323", ""]

for c in CASES:
    print(json.dumps({"text": c}))
cps = [c for c in range(0x110000)
       if c in LATER or unicodedata.combining(chr(c)) or unicodedata.decomposition(chr(c))]
for i in range(0, len(cps), 256):
    print(json.dumps({"text": " ".join("a\u0316%s\u0301%s" % (chr(c), chr(c)) for c in cps[i:i + 256])}))
