"""Loading the checkpoint's tokenizer, locally and without remote code unless the spec opts in."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

# The class AutoTokenizer picks for a checkpoint whose tokenizer_config.json names the generic fast
# tokenizer (what transformers 5 saves for a plain tokenizer.json; TokenizersBackend is
# PreTrainedTokenizerFast under its new name). Loading that class directly is the same tokenizer without
# `import transformers.AutoTokenizer`, which imports torch through the model configs: 4.8 s against
# 1.5 s and 240 MB less per process on the 2-core CPU (2026-12-07), paid by every preprocessing
# instance and OpenAI worker at every start.
GENERIC_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def tokenizer_class(path: str) -> str | None:
    """The class tokenizer_config.json names, or None (no file, no name, or code of its own to run)."""
    config = Path(path) / "tokenizer_config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    if data.get("auto_map"):
        return None
    return data.get("tokenizer_class")


@lru_cache(maxsize=4)
def load_hf_tokenizer(path: str, trust_remote_code: bool = False):
    if tokenizer_class(path) in GENERIC_CLASSES:
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    if not tok.is_fast:
        raise ValueError(f"{path}: a fast (tokenizers) tokenizer is required for exact streaming detokenization")
    return tok


def load_fast(path: str) -> Tokenizer:
    """The raw tokenizers.Tokenizer: what DecodeStream and batch decoding both use, so streamed and
    non-streamed text come from the same decoder."""
    return Tokenizer.from_file(str(Path(path) / "tokenizer.json"))


def resolve_dir(value: str, model_dir: str) -> str:
    """Config paths are relative to the model repository (the parent of the model's folder)."""
    p = Path(value)
    return str(p if p.is_absolute() else (Path(model_dir).parent / p).resolve())
