"""Loading the checkpoint's tokenizer, locally and without remote code unless the spec opts in."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer


@lru_cache(maxsize=4)
def load_hf_tokenizer(path: str, trust_remote_code: bool = False):
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
