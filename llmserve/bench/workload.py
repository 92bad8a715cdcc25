"""Synthetic prompts with an exact number of input tokens under the model's tokenizer.

Prompts are made of whole-word tokens (" word"): the pre-tokenizer splits on spaces, so a string
of such tokens encodes back to exactly those tokens. Every prompt is checked by re-encoding it."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

WORD = re.compile(r"^ [a-z]{2,10}$")


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: list[int]


def _word_ids(tok: Tokenizer) -> list[int]:
    ids = []
    for i in tok.get_vocab().values():
        text = tok.decode([i])
        if WORD.match(text) and tok.encode(text, add_special_tokens=False).ids == [i]:
            ids.append(i)
    if len(ids) < 100:
        raise ValueError("the tokenizer has too few whole-word tokens to build synthetic prompts")
    return sorted(ids)


def make_prompts(tokenizer_dir: str | Path, n: int, input_len: int, seed: int = 0) -> list[Prompt]:
    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    words, rng, out = _word_ids(tok), random.Random(seed), []
    while len(out) < n:
        ids = [rng.choice(words) for _ in range(input_len)]
        text = tok.decode(ids)
        got = tok.encode(text, add_special_tokens=False).ids
        if len(got) == input_len:  # almost always; otherwise draw again
            out.append(Prompt(text, got))
    return out
