"""The tokenizer-info file TensorRT-LLM's C++ backend reads for guided decoding
(`xgrammar_tokenizer_info_path`), written at engine build as upstream's build scripts do. One JSON
object: `encoded_vocab` (every token string, in id order), `tokenizer_str` (the fast tokenizer's
serialized form, from which xgrammar tells how the vocabulary encodes bytes: byte-level, byte
fallback, raw) and `stop_token_ids` (the tokenizer's end token). Torch- and xgrammar-free: the build
only needs the checkpoint's tokenizer. engine/guided.tokenizer_info_from_file reads it back."""

from __future__ import annotations

import json
from pathlib import Path

FILE_NAME = "xgrammar_tokenizer_info.json"


def tokenizer_info(tokenizer) -> dict:
    """tokenizer: a transformers fast tokenizer (the checkpoint's own)."""
    vocab = tokenizer.get_vocab()
    return {
        "encoded_vocab": [token for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])],
        "tokenizer_str": tokenizer.backend_tokenizer.to_str(),
        "stop_token_ids": [tokenizer.eos_token_id],
    }


def write(tokenizer, path: Path) -> Path:
    """Written whole under a temporary name first: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(tokenizer_info(tokenizer)))
    tmp.replace(path)
    return path
