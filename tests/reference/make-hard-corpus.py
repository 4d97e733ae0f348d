#!/usr/bin/env python3
"""Write a deterministic JSON-lines corpus of the hard cases of byte-level BPE
pre-tokenization to stdout, for comparing mt-tokenize with tiktoken (ref-encode.js).

    make-hard-corpus.py [--seed N] [--lines N] [--recent-unicode] > corpus.jsonl

Each line is a JSON object with "text": a string, or (Megatron's pre-split
documents) a list of strings; some lines carry other keys too, and a few have no
"text" at all. The cases: English with contractions in every case, numbers and
digit runs, whitespace runs of every kind (ASCII, Unicode White_Space, and look-alikes
that are not White_Space), emoji sequences, CJK, RTL and Indic scripts, combining
marks, cased letters of many scripts, punctuation, URLs, code, math, control
characters, "<|endoftext|>" as plain text, empty and whitespace-only documents,
1000+ letter words, and lone UTF-16 surrogates written as JSON escapes ("\\ud800").

By default only characters assigned in Unicode 14 appear (Python 3.11's
unicodedata is Unicode 14, and every character is checked against it), so a regex
engine with Unicode 14 tables (PCRE2 10.42) can match tiktoken exactly. With
--recent-unicode it writes instead a small corpus of letters and digits assigned
in Unicode 15 to 16, each line tagged with "unicode" (the version) and "script".
"""
import argparse
import json
import re
import sys
import unicodedata
from random import Random

# --- character pools -------------------------------------------------------

ASCII_SPACES = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c"]
# Unicode White_Space other than ASCII: \s in tiktoken's patterns.
UNICODE_SPACES = (["\u0085", "\u00a0", "\u1680"] + [chr(c) for c in range(0x2000, 0x200B)]
                  + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"])
# Look like separators but are not White_Space: U+180E (not since Unicode 6.3),
# U+001C..U+001F (space for Python's str.isspace, not for Unicode), zero-width ones.
NOT_SPACES = ["\u180e", "\x1c", "\x1d", "\x1e", "\x1f", "\u200b", "\u2060", "\ufeff"]
CONTROLS = ([chr(c) for c in range(0x00, 0x09)] + [chr(c) for c in range(0x0E, 0x1C)]
            + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0) if c != 0x85]
            + ["\u00ad", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c",
               "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u2061", "\u2062",
               "\ufff9", "\ufffa", "\ufffb", "\ufffc", "\ufffd", "\ue000", "\uf8ff",
               "\U000f0000", "\U0010fffd", "\U000e0001", "\U000e0041", "\U000e007f",
               # noncharacters: permanently unassigned, valid in UTF-8
               "\ufdd0", "\ufdef", "\ufffe", "\uffff", "\U0001fffe", "\U0010ffff"])
NONCHARACTERS = {c for c in CONTROLS if unicodedata.category(c) == "Cn"}

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M",
                "'LL", "'D", "'Re", "'rE", "'Ve", "'Ll", "'lL", "n't", "N'T", "’s", "’ll",
                "’re", "’S", "’t", "''s", "'", "’"]
ENGLISH = ("the quick brown fox jumps over lazy dog model data training token I you we they "
           "he she it John Mary OpenAI NASA Megatron GPU tokenizer isn can don won shouldn "
           "y'all o'clock rock 'n' roll ma'am 'tis '90s it's let's dogs' James's Jones' "
           "sand stop till llama dive med mend reveal ream 'sand 'stop 'till 'llama 'dive "
           "'med said seed suit vet the a an of to in is that for on with as was at by be "
           "this from or have are but not what all were when we there can been has more "
           "if will one do no which their said its time about would up out them so some her "
           "like him into than look only come its over think also back after use two how "
           "our work first well way even new want because any these give day most us").split()
CASED_WORDS = ("CamelCase camelCase HTTPServer XMLHttpRequest iPhone eBay McDonald O'Neil "
               "ALLCAPS SHOUTING Title Case PascalCase snake_case kebab-case SCREAMING_SNAKE "
               "getHTTPResponseCode IOError parseJSONString mIxEdCaSe aBcDeF ABCdef abcDEF "
               "ǅemal ǈubljana ǋegoš ǲ ᾈᾉᾊ ẞTRAẞE Straße İstanbul ıiIİ ΣΊΣΥΦΟΣ σοφός ΌΣΟΣ "
               "ПРИВЕТмир ПриветМир ԱՐԱՐԱՏ Արարատ ᲒᲐᲛᲐᲠᲯᲝᲑᲐ გამარჯობა ᏣᎳᎩ ꭰꭱꭲ ⰀⰁⰂⰰⰱⰲ "
               "𐐔𐐯𐑅𐐨𐑉𐐯𐐻 𐓏𐓘𐓻𐓘𐓻𐓟 𞤀𞤣𞤤𞤢𞤥 ﬁnance ﬂow ŉ ǰ ΐ").split()
SCRIPTS = {
    "chinese": "我们 今天 学习 自然语言处理 模型 训练数据 北京 上海 中华人民共和国 你好世界 这是一个测试 "
               "龍 齉 𠀀 𠁂 𪚥 "
               "，。！？：；“”《》（）、",
    "japanese": "これは テストです。 カタカナ ひらがな 日本語 東京タワー ありがとうございます ｶﾀｶﾅ ﾊﾞｯﾄ "
                "ヴァイオリン ー 〜 ・ 「引用」 『二重』 ゟ ヿ ㋿",
    "korean": "안녕하세요 세계 한국어 토큰화 테스트입니다 서울특별시 ᄀᄁᄂ ᅡᅢ ㄱㄴㄷ ㅏㅑ 똠방각하 "
              "갂갃갅 ㉠ ㈀",
    "arabic": "مرحبا بالعالم هذا اختبار للغة العربية مُحَمَّد ـــــ ٠١٢٣٤٥٦٧٨٩ ۰۱۲۳ ، ؛ ؟ "
              "ﷺ ﷽ ﻻ",
    "hebrew": "שלום עולם זה מבחן שָׁלוֹם עִבְרִית ״ ׳ ﬠ ﬡ",
    "devanagari": "नमस्ते दुनिया यह एक परीक्षण है हिन्दी क्षत्रिय ०१२३४५६७८९ ॐ ।",
    "thai": "สวัสดีชาวโลก นี่คือการทดสอบ ภาษาไทย ๐๑๒๓ ฯลฯ ำ ๆ",
    "indic": "வணக்கம் உலகம் হ্যালো বিশ্ব ਸਤਿ ਸ੍ਰੀ ਅਕਾਲ ગુજરાતી ಕನ್ನಡ മലയാളം తెలుగు ଓଡ଼ିଆ "
             "සිංහල ০১২ ੦੧੨ ௧௨௩",
    "misc": "Καλημέρα κόσμε Привет мир ёжик Բարև աշխարհ ሰላም ዓለም ᚠᚢᚦᚨᚱᚲ ᚛ᚁᚂᚃ᚜ ᠮᠣᠩᠭᠣᠯ "
            "བོད་ཡིག ភាសាខ្មែរ ພາສາລາວ မြန်မာ 𐌲𐌿𐍄𐌹𐍃𐌺 ⲀⲁⲂⲃ Tiếng Việt ắằẳẵặ "
            "Zażółć gęślą jaźń ʰʲʷˠˤ ᵃᵇᶜ ª º ƻ ǀ ǁ ߊߋߌ ߀߁߂ ᐊᐃᑲ ꦗꦮ ꓐꓑ ꚠꚡ",
    "numbers": "ⅠⅡⅢⅫ ⅰⅱⅲ ↀↁ 〇〡〢 ²³¹ ¼½¾ ①②③ ⑴⑵ ⓵ ❶❷ 𝍠 ０１２３ 𝟎𝟏 𝟘𝟙 𞥐𞥑 ፩፪ ᠐᠑",
    "emoji": "😀 😂 🤖 👍 👍🏽 👍🏿 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🏴‍☠️ 🇺🇸 🇯🇵 🇩🇪 🇪🇺 🏴󠁧󠁢󠁳󠁣󠁴󠁿 #️⃣ 1️⃣ *️⃣ "
             "❤️ ✔️ ☺︎ 🧑🏿‍🤝‍🧑🏻 🫠 🫶🏼 🧔‍♀️ 🐻‍❄️ 🏃🏽‍♂️‍➡️ ©️ ™ 🀄 🃏",
    "math": "∀x∈ℝ: x²≥0 ∑ᵢ₌₁ⁿ i = n(n+1)/2 ∫₀^∞ e^{-x²}dx = √π/2 ≠ ≤ ≥ ≈ ∞ ∂ ∇ ⊗ ⊕ → ⇒ ↔ "
            "∧ ∨ ¬ ⊂ ⊆ ∩ ∪ ∅ ℵ₀ ℏ ℓ ℘ ℑ ℜ 𝐀𝐁𝐂 𝑎𝑏𝑐 𝔸𝔹ℂ 𝓐𝓑 ⟨ψ|φ⟩ ±∓×÷ ‰ ‱ °C ℃ Å",
}
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0304", "\u0327", "\u0323", "\u0331", "\u034f",
             "\u0336", "\u0351", "\u0362", "\u036f", "\u20dd", "\u20e3", "\ufe0f", "\ufe0e",
             "\U000e0100", "\u0e31", "\u093f", "\u05b8", "\u064e", "\u302a", "\u3099"]
PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
UNI_PUNCT = ["…", "—", "–", "‐", "«", "»", "„", "“", "”", "‘", "’", "¿", "¡", "・", "、", "。",
             "§", "¶", "†", "‡", "•", "‣", "⁂", "※", "〽", "᠆", "؟", "჻", "፨", "¦", "´", "¨"]
SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
            "<|endofprompt|>", "<|im_start|>", "<|endoftext", "endoftext|>", "< |endoftext| >",
            "<|ENDOFTEXT|>", "<||>", "<|endoftext|><|endoftext|>"]
URLS = ["https://example.com/path/to/page?query=1&x=y#frag", "http://例え.jp/パス?q=日本",
        "mailto:first.last+tag@example.org", "file:///C:/Windows/System32/drivers/etc/hosts",
        "ftp://ftp.example.net/pub/file-1.2.3.tar.gz", "https://en.wikipedia.org/wiki/Byte_pair_encoding",
        "www.example.co.uk/~user/index.html", "http://[2001:db8::1]:8080/", "/usr/local/lib/libmt.a",
        "C:\\Users\\Default\\AppData\\Local\\Temp\\x.tmp", "s3://bucket/key/part-00000.jsonl.zst",
        "https://xn--n3h.example/%E2%98%83?a=%20b", "git@github.com:org/repo.git"]
CODE = [
    "#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n\tfor (int i = 0; i < argc; i++)\n"
    "\t\tprintf(\"%d: %s\\n\", i, argv[i]);\n\treturn 0;\n}\n",
    "static inline uint32_t rotl(uint32_t x, int k) { return (x << k) | (x >> (32 - k)); }",
    "def tokenize(text: str) -> list[int]:\n    \"\"\"Split, then merge.\"\"\"\n    ids = []\n"
    "    for piece in re.findall(PAT, text):\n        ids.extend(bpe(piece.encode('utf-8')))\n"
    "    return ids\n",
    "    if x == 0:  \n        pass    \n\n\n    else:\n\t\treturn None\t\n",
    "{\"name\": \"mt\", \"version\": \"0.1.0\", \"deps\": [\"jansson\", \"pcre2\"], \"ok\": true, "
    "\"n\": -1.5e-10, \"nested\": {\"a\": [1, 2, {\"b\": null}]}}",
    "$ for f in *.jsonl; do zstd -q \"$f\" && echo \"$f\" >> done.txt; done 2>&1 | tee log",
    "<div class=\"x\" id='y'><p>Hello&nbsp;&amp;&lt;world&gt;</p><!-- comment --></div>",
    "| col1 | col2 |\n|------|:----:|\n| `a`  | **b** |\n\n```python\nprint('hi')\n```\n",
    "SELECT id, COUNT(*) AS n FROM docs WHERE text LIKE '%''s%' GROUP BY id HAVING n > 1;",
    "x = a->b[i++] ?: *p-- >>= 2; /* ** /// */ // end\r\n#define MAX(a,b) ((a)>(b)?(a):(b))",
    "fn main() { let v: Vec<u8> = b\"\\x00\\xff\".to_vec(); println!(\"{:?}\", v); }",
    "\\begin{equation} E = mc^2 \\quad \\forall x \\in \\mathbb{R} \\end{equation}",
]


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def words(pool):
    return pool.split()


# --- fragment generators: each returns a str --------------------------------

def english(rng):
    """Prose with contractions in every case and typographic apostrophes."""
    out = []
    for _ in range(rng.randint(1, 6)):
        sentence = []
        for _ in range(rng.randint(3, 18)):
            w = pick(rng, ENGLISH)
            r = rng.random()
            if r < 0.25:
                w += pick(rng, CONTRACTIONS)
            elif r < 0.30:
                w = pick(rng, CONTRACTIONS) + w
            case = rng.random()
            w = w.upper() if case < 0.1 else w.title() if case < 0.2 else w
            sentence.append(w)
        sentence[0] = sentence[0][:1].upper() + sentence[0][1:]
        out.append(" ".join(sentence) + pick(rng, [".", ".", "!", "?", "...", "'", "’.", ":", ";"]))
    return pick(rng, [" ", "  ", "\n", " \n"]).join(out)


def cased(rng):
    """Mixed-case words: o200k's pattern splits at lower-to-upper changes."""
    return pick(rng, [" ", "", "_", "-", "."]).join(pick(rng, CASED_WORDS) for _ in range(rng.randint(1, 10)))


def digits(rng, n):
    return "".join(str(rng.randrange(10)) for _ in range(n))


def numbers(rng):
    """Digit runs of 1-40, grouped, decimal, signed, mixed with letters and units."""
    forms = [
        lambda: digits(rng, rng.randint(1, 40)),
        lambda: ",".join([str(rng.randint(1, 999))] + [digits(rng, 3) for _ in range(rng.randint(1, 6))]),
        lambda: digits(rng, rng.randint(1, 12)) + "." + digits(rng, rng.randint(1, 20)),
        lambda: pick(rng, ["-", "+", "−", "$", "€", "£", "¥", "#", "№"]) + digits(rng, rng.randint(1, 9)),
        lambda: digits(rng, rng.randint(1, 4)) + pick(rng, ["st", "nd", "rd", "th", "%", "px", "GB", "'s", "e-10", "x"]),
        lambda: "0x" + "".join(pick(rng, "0123456789abcdefABCDEF") for _ in range(rng.randint(1, 16))),
        lambda: f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z",
        lambda: f"+1 ({digits(rng, 3)}) {digits(rng, 3)}-{digits(rng, 4)}",
        lambda: "v" + ".".join(str(rng.randint(0, 99)) for _ in range(rng.randint(2, 4))),
        lambda: pick(rng, ENGLISH) + digits(rng, rng.randint(1, 6)) + pick(rng, ENGLISH),
        lambda: digits(rng, rng.randint(1, 5)) + pick(rng, ["١٢٣", "०१२", "０１２", "²", "½", "Ⅻ", "①"]),
    ]
    return pick(rng, [" ", ", ", "\n", "", "/", " - "]).join(pick(rng, forms)() for _ in range(rng.randint(1, 8)))


def space_run(rng):
    """A run of whitespace: ASCII, Unicode White_Space, or a mix of both."""
    pool = pick(rng, [[" "], ["\t"], ["\n"], ["\r\n"], ASCII_SPACES, UNICODE_SPACES, ASCII_SPACES + UNICODE_SPACES])
    return "".join(pick(rng, pool) for _ in range(rng.randint(1, 40)))


def whitespace(rng):
    """Words separated and ended by whitespace runs and look-alike separators."""
    out = []
    for _ in range(rng.randint(1, 10)):
        out.append(pick(rng, [pick(rng, ENGLISH), pick(rng, CASED_WORDS), digits(rng, rng.randint(1, 5)),
                              pick(rng, UNI_PUNCT), pick(rng, PUNCT), pick(rng, words(SCRIPTS["chinese"]))]))
        out.append(space_run(rng) if rng.random() < 0.8 else pick(rng, NOT_SPACES))
    return "".join(out)


def script(rng):
    """A few words of one script, spaced as that script is written."""
    pool = words(SCRIPTS[pick(rng, list(SCRIPTS))])
    return pick(rng, [" ", " ", "", "\n", "\u3000"]).join(pick(rng, pool) for _ in range(rng.randint(1, 12)))


def combining(rng):
    """Bases with one or many combining marks, Zalgo-like stacks included."""
    out = []
    for _ in range(rng.randint(1, 8)):
        base = pick(rng, "aeiouAEIOUnNcszZ0 ?.日하क")
        out.append(base + "".join(pick(rng, COMBINING) for _ in range(rng.choice([1, 1, 2, 3, 8, 30]))))
    return pick(rng, ["", " "]).join(out)


def punctuation(rng):
    """Punctuation runs, with spaces, newlines and '/' (o200k absorbs [\\r\\n/]*)."""
    out = []
    for _ in range(rng.randint(1, 6)):
        pool = pick(rng, [PUNCT, UNI_PUNCT, list(PUNCT) + UNI_PUNCT, ["!", "?", "."], ["-", "=", "*", "#"]])
        out.append("".join(pick(rng, pool) for _ in range(rng.randint(1, 30))))
        out.append(pick(rng, ["", " ", "\n", "\n\n", "/", "//\n", "\r\n", " a", "1"]))
    return "".join(out)


def controls(rng):
    """Control, format, private-use and noncharacter code points amid text."""
    return "".join(pick(rng, CONTROLS) + pick(rng, ["", "a", " ", "1", "'s", "\n"]) for _ in range(rng.randint(1, 12)))


def misc(rng):
    """URLs, code, math and special-token text (plain text for encode_ordinary)."""
    return pick(rng, [
        lambda: pick(rng, URLS),
        lambda: pick(rng, CODE),
        lambda: pick(rng, SPECIALS),
        lambda: pick(rng, ENGLISH) + pick(rng, SPECIALS) + pick(rng, ENGLISH),
        lambda: pick(rng, ["", " ", "\n"]).join(pick(rng, words(SCRIPTS["math"])) for _ in range(rng.randint(1, 10))),
    ])()


def long_word(rng):
    """One very long 'word' (1000+ letters) or run of one character class."""
    n = rng.randint(1000, 3000)
    return pick(rng, [
        lambda: "".join(pick(rng, "abcdefghijklmnopqrstuvwxyz") for _ in range(n)),
        lambda: "".join(pick(rng, "aAbBcCdDeE") for _ in range(n)),
        lambda: pick(rng, ["a", "e", "z", "A", "é", "ß", "ab", "Ab"]) * n,
        lambda: "".join(pick(rng, words(SCRIPTS["chinese"])[:10]) for _ in range(n // 6)),
        lambda: "".join(pick(rng, words(SCRIPTS["korean"])[:6]) for _ in range(n // 6)),
        lambda: digits(rng, n),
        lambda: " " * n + "x",
        lambda: pick(rng, ["\t", "\n", "\u3000", "\u00a0", " \n"]) * (n // 2),
        lambda: "".join(pick(rng, PUNCT) for _ in range(n)),
        lambda: "".join(pick(rng, words(SCRIPTS["emoji"])) for _ in range(n // 8)),
        lambda: "e" + "".join(pick(rng, COMBINING[:12]) for _ in range(n // 2)),
    ])()


def surrogates(rng):
    """Text with lone UTF-16 surrogates; to_json() writes them as \\uXXXX escapes."""
    cases = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud800a", "\ud83d!", "\udc00\ud800",
             "\ud800\ud800", "\udfff\udfff", "\ud83d\ude00", "\ud83d\ude00\ude00",
             "\ud83d\ud83d\ude00", "\ud834\udd1e", "\udbff\udfff"]
    out = []
    for _ in range(rng.randint(1, 6)):
        out.append(pick(rng, cases))
        out.append(pick(rng, ["", " ", "a", "'s", "1", "\n", "日本", "😀", "\u0301", pick(rng, ENGLISH) + " "]))
    return "".join(out)


GENERATORS = [  # (weight, generator)
    (10, english), (4, cased), (6, numbers), (6, whitespace), (8, script), (3, combining),
    (3, punctuation), (2, controls), (5, misc), (1, surrogates),
]


def fragment(rng):
    gen = rng.choices([g for _, g in GENERATORS], weights=[w for w, _ in GENERATORS])[0]
    return gen(rng)


def document(rng):
    """Several fragments, joined by nothing (boundary cases) or whitespace, often
    ending in whitespace; now and then one very long word."""
    parts = [fragment(rng) for _ in range(rng.randint(1, 10))]
    if rng.random() < 0.04:
        parts.insert(rng.randrange(len(parts) + 1), long_word(rng))
    text = "".join(p + pick(rng, ["", " ", "\n", "\n\n", "\t", " \n", pick(rng, UNICODE_SPACES)]) for p in parts)
    return text if rng.random() < 0.5 else text.rstrip()


def sentences(rng):
    """A pre-split document: a list of strings, empty ones included."""
    return [pick(rng, ["", " ", document(rng)]) if rng.random() < 0.15 else document(rng)
            for _ in range(rng.randint(1, 8))]


# --- fixed cases, always first ----------------------------------------------

def fixed_texts():
    """Small documents that each isolate one case."""
    texts = ["", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n ", "a", "a ", " a", "a\n", "'s", "'S",
             " 's", "''", "'", "’s", "0", "00", "000", "0000", "1234567890" * 4, "1,234,567.89",
             "<|endoftext|>", " <|endoftext|> ", "\x00", "\x00a\x00", "\ufffd", "e\u0301", "\u0301",
             "Z\u0335\u0351\u0362" * 20, "👨‍👩‍👧‍👦", "🇺🇸🇯🇵", "👍🏽", "日本語", "한국어", "עברית",
             "ไทย", "हिन्दी", "a" * 1000, " " * 1000, "\n" * 1000, "x" + " " * 1000]
    texts += UNICODE_SPACES + NOT_SPACES
    texts += ["a" + c + "b" for c in UNICODE_SPACES + NOT_SPACES]
    texts += ["a" + c * 3 + "b" + c for c in UNICODE_SPACES + NOT_SPACES]
    texts += [w + c for w in ["it", "IT", "It", "1", "日", " ", "!", ""] for c in CONTRACTIONS]
    texts += [c + w for c in CONTRACTIONS for w in ["sand", "LLAMA", "veal", "d", " "]]
    return texts


def fixed_records():
    recs = [{"text": t} for t in fixed_texts()]
    recs += [{"text": []}, {"text": [""]}, {"text": ["", ""]}, {"text": ["a", "", "b"]},
             {"text": [" ", "\n"]}, {"title": "no text key"}, {"id": 7, "meta": {"text": "nested"}},
             {"text": "x", "title": "keys after"}, {"title": "keys before", "text": "x"}]
    return recs


# --- records and JSON -------------------------------------------------------

def record(rng):
    r = rng.random()
    if r < 0.01:
        return {"title": document(rng)[:80], "id": rng.randrange(10**6)}  # no "text"
    text = sentences(rng) if r < 0.15 else document(rng)
    if rng.random() < 0.8:
        return {"text": text}
    extra = {"title": document(rng)[:60], "id": rng.randrange(10**9), "url": pick(rng, URLS),
             "meta": {"lang": pick(rng, ["en", "zh", "ja", "ar"]), "score": rng.random(), "tags": ["a", "b"]}}
    keys = rng.sample(sorted(extra), rng.randint(1, len(extra)))
    rec = {k: extra[k] for k in keys}
    rec["text"] = text
    if rng.random() < 0.5:  # "text" not always last
        rec = dict(sorted(rec.items(), key=lambda kv: rng.random()))
    return rec


SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(rec, rng):
    """One JSON line. UTF-8 (ensure_ascii=False); surrogate code points, which
    UTF-8 cannot carry, become \\uXXXX escapes written here by hand; a few lines
    are all-ASCII so that every character goes through a \\u escape."""
    ascii_only = rng.random() < 0.03
    line = json.dumps(rec, ensure_ascii=ascii_only)
    hexfmt = "\\u%04x" if rng.random() < 0.5 else "\\u%04X"
    return SURROGATE.sub(lambda m: hexfmt % ord(m.group()), line)


def check_assigned(rec):
    """Default corpus only: every character is assigned in Python's unicodedata
    (Unicode 14 on Python 3.11), surrogates and noncharacters aside."""
    for s in json.dumps(rec, ensure_ascii=False):
        if unicodedata.category(s) == "Cn" and s not in NONCHARACTERS:
            sys.exit(f"make-hard-corpus.py: U+{ord(s):04X} is unassigned in Unicode {unicodedata.unidata_version}")


# --- recent Unicode (15.0 to 16.0) ------------------------------------------

RECENT = [  # (version, script, code point ranges: letters/digits/marks)
    ("15.0", "CJK Extension H", [(0x31350, 0x323AF)]),
    ("15.1", "CJK Extension I", [(0x2EBF0, 0x2EE5D)]),
    ("15.0", "Kawi", [(0x11F04, 0x11F10), (0x11F12, 0x11F33), (0x11F34, 0x11F3A)]),
    ("15.0", "Kawi digits", [(0x11F50, 0x11F59)]),
    ("15.0", "Nag Mundari", [(0x1E4D0, 0x1E4EB), (0x1E4EC, 0x1E4EF)]),
    ("15.0", "Nag Mundari digits", [(0x1E4F0, 0x1E4F9)]),
    ("15.0", "Kaktovik numerals", [(0x1D2C0, 0x1D2D3)]),
    ("15.0", "Cyrillic Extended-D", [(0x1E030, 0x1E06D)]),
    ("15.0", "Latin Extended-G", [(0x1DF25, 0x1DF2A)]),
    ("16.0", "Garay", [(0x10D50, 0x10D65), (0x10D70, 0x10D85)]),
    ("16.0", "Garay digits", [(0x10D40, 0x10D49)]),
    ("16.0", "Todhri", [(0x105C0, 0x105F3)]),
    ("16.0", "Sunuwar", [(0x11BC0, 0x11BE0)]),
    ("16.0", "Kirat Rai digits", [(0x16D70, 0x16D79)]),
    ("16.0", "Ol Onal", [(0x1E5D0, 0x1E5ED)]),
]


def recent_record(rng, version, name, ranges):
    def word():
        lo, hi = pick(rng, ranges)
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))
    parts = [word()] + [pick(rng, [word(), word(), word(), pick(rng, ENGLISH), digits(rng, 2), "'s", "!"])
                        for _ in range(rng.randint(0, 11))]
    seps = ["", "", " ", "\n", "'s ", "\u3000"]
    return {"text": "".join(p + pick(rng, seps) for p in parts), "unicode": version, "script": name}


# --- main -------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=20240601, help="random seed (default %(default)s)")
    ap.add_argument("--lines", type=int, help="lines to write (default 2400, or 120 with --recent-unicode)")
    ap.add_argument("--recent-unicode", action="store_true",
                    help="write only lines with characters assigned in Unicode 15.0 to 16.0")
    args = ap.parse_args()
    rng = Random(args.seed)
    out = sys.stdout
    if args.recent_unicode:
        for i in range(120 if args.lines is None else args.lines):
            out.write(to_json(recent_record(rng, *RECENT[i % len(RECENT)]), rng) + "\n")
        return
    lines = 2400 if args.lines is None else args.lines
    recs = fixed_records()[:lines]
    recs += (record(rng) for _ in range(lines - len(recs)))
    for rec in recs:
        check_assigned(rec)
        out.write(to_json(rec, rng) + "\n")


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8", newline="\n")
    main()
