"""Guided decoding (TensorRT-LLM's `guided_decoding_guide_type` / `guided_decoding_guide`) with xgrammar,
the grammar library TensorRT-LLM itself uses, so both engines accept the same guides:

- `grammar_of(type, guide)`: the guide parsed into an xgrammar Grammar (no tokenizer needed), or a
  GuideError saying what is wrong with it: what preprocessing and the token-level parsers call, so a
  bad guide is refused before the request reaches the engine;
- `GrammarCache`: grammars compiled against the model's vocabulary, least recently used first out,
  keyed by (type, guide), so a schema sent again costs a dictionary look-up;
- `Masker`: per engine step, fills the token bitmask of the guided rows only (one GrammarMatcher per
  guided sequence; xgrammar's batched fill, while the step's graph runs on the GPU) and applies it to
  those rows of the step's logits in one batched call; `accept` advances the matchers in one call. A step with
  no guided sequence never builds one (Engine._sample asks `masker()` first, which returns None).

The end token is allowed exactly when the grammar is complete: each matcher's stop tokens are the
request's end ids, and xgrammar sets their bits only in an accepting state."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import torch
import xgrammar as xgr

from ..contract import GUIDE_TYPES

JSON, JSON_SCHEMA, REGEX, EBNF, STRUCTURAL_TAG = GUIDE_TYPES
CACHE_SIZE = 128  # compiled grammars kept per engine

# xgrammar's messages start with its C++ location: "[11:07:35] /project/cpp/regex_converter.cc:94: ".
_LOCATION = re.compile(r"^\[[^\]]*\] \S+:\d+: (Check failed: \([^)]*\) is false: )?")


class GuideError(ValueError):
    """The guide is not a valid guide of its type (the message says why, without xgrammar's location)."""


def _clean(e: Exception) -> str:
    return _LOCATION.sub("", str(e).strip()).strip()


@lru_cache(maxsize=CACHE_SIZE)
def grammar_of(guide_type: str, guide: str) -> xgr.Grammar:
    """Parse one guide. `json` takes no guide (any JSON value, as upstream's GuideType::JSON)."""
    if guide_type not in GUIDE_TYPES:
        raise GuideError(f"must be one of {', '.join(GUIDE_TYPES)}, got {guide_type!r}")
    try:
        if guide_type == JSON:
            return xgr.Grammar.builtin_json_grammar()
        if guide_type == JSON_SCHEMA:
            json.loads(guide)  # a clearer message than the converter's for text that is not JSON
            return xgr.Grammar.from_json_schema(guide)
        if guide_type == REGEX:
            return xgr.Grammar.from_regex(guide)
        if guide_type == EBNF:
            return xgr.Grammar.from_ebnf(guide)
        return xgr.Grammar.from_structural_tag(guide)
    except json.JSONDecodeError as e:
        raise GuideError(f"is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except (RuntimeError, ValueError, TypeError) as e:  # xgrammar raises RuntimeError for bad input
        raise GuideError(f"is not a valid {guide_type}: {_clean(e)}") from None


def tokenizer_info_from_hf(tokenizer, vocab_size: int, stop_token_ids: Sequence[int] | None) -> xgr.TokenizerInfo:
    """From the checkpoint's own HF tokenizer (the torch engine, at load; no downloads). vocab_size is
    the model's (its lm_head rows): the bitmask covers every logit, padding rows included (never allowed)."""
    stops = list(stop_token_ids) if stop_token_ids else None  # None: the tokenizer's eos token
    return xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)


def tokenizer_info_from_file(path: str | Path, vocab_size: int) -> xgr.TokenizerInfo:
    """What the C++ backend builds from the file text/xgrammar_info.py writes (the stand-in reads it
    the same way): xgrammar's TokenizerInfo from the vocabulary and the encoding it detects in the
    serialized tokenizer."""
    data = json.loads(Path(path).read_text())
    meta = xgr.TokenizerInfo._detect_metadata_from_hf(data["tokenizer_str"])
    return xgr.TokenizerInfo(
        data["encoded_vocab"],
        meta["vocab_type"],
        vocab_size=vocab_size,
        stop_token_ids=data["stop_token_ids"],
        add_prefix_space=meta["add_prefix_space"],
    )


class GrammarCache:
    """Compiled grammars for one tokenizer, by (type, guide), least recently used evicted. Thread-safe:
    requests are parsed on Triton's threads while the engine thread runs."""

    def __init__(self, info: xgr.TokenizerInfo, capacity: int = CACHE_SIZE, threads: int = 2):
        # xgrammar's own cache is off: this one bounds the count and is the one the tests observe.
        self.compiler = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
        self.capacity = capacity
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], xgr.CompiledGrammar] = OrderedDict()

    def compile(self, guide_type: str, guide: str) -> xgr.CompiledGrammar:
        key = (guide_type, guide)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return hit
            self.misses += 1
        try:
            compiled = self.compiler.compile_grammar(grammar_of(guide_type, guide))
        except (RuntimeError, ValueError) as e:
            raise GuideError(f"is not a valid {guide_type}: {_clean(e)}") from None
        with self._lock:
            self._entries[key] = compiled
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return compiled


def matcher(compiled: xgr.CompiledGrammar, end_ids: Sequence[int]) -> xgr.GrammarMatcher:
    """One per guided sequence. Its stop tokens are the request's end ids, so the end token is allowed
    only when the grammar is complete."""
    # No end ids (a model without one, a test): the tokenizer info's stop tokens (xgrammar refuses none).
    return xgr.GrammarMatcher(compiled, override_stop_tokens=list(end_ids) or None)


_batch: xgr.BatchGrammarMatcher | None = None


def _batch_matcher() -> xgr.BatchGrammarMatcher:
    """One per process: xgrammar's batched fill and accept run on its own threads with the GIL released,
    instead of one Python call per guided row (the mask is 0.26-0.35 ms of a 64-row guided step's extra
    ~0.9 ms on the H200; the rest is the guided rows' own sampling: docs/PERFORMANCE.md)."""
    global _batch
    if _batch is None:
        _batch = xgr.BatchGrammarMatcher(max_threads="auto")
    return _batch


# Below this many guided rows a Python loop is cheaper than the batched call's thread hand-off (H200,
# scripts/h200/guided.sh: one row's mask 0.08-0.11 ms looped, 0.33-0.51 ms batched; 64 rows gain).
BATCH_MIN_ROWS = 8


def accept(matchers: list[xgr.GrammarMatcher], tokens: list[int]) -> list[bool]:
    """Each matcher takes its row's token; False: the token breaks the grammar."""
    if len(matchers) < BATCH_MIN_ROWS:
        return [m.accept_token(t) for m, t in zip(matchers, tokens)]
    return _batch_matcher().batch_accept_token(matchers, tokens)


class Masker:
    """The grammar mask of one step's rows; `matchers[i]` is row i's matcher or None (unguided). Two
    halves: fill() is CPU work only (the engine runs it while the step's graph is on the GPU),
    __call__ applies it to the logits (filling first if nobody did)."""

    def __init__(self, matchers: list[xgr.GrammarMatcher | None], bitmask: torch.Tensor | None = None):
        self.matchers = matchers
        self.rows = [i for i, m in enumerate(matchers) if m is not None]
        self.bitmask = bitmask

    def fill(self, vocab_size: int) -> None:
        if self.bitmask is None:
            bitmask = xgr.allocate_token_bitmask(len(self.matchers), vocab_size)
            if len(self.rows) < BATCH_MIN_ROWS:
                for i in self.rows:
                    self.matchers[i].fill_next_token_bitmask(bitmask, i)
            else:
                _batch_matcher().batch_fill_next_token_bitmask(
                    [self.matchers[i] for i in self.rows], bitmask, self.rows
                )
            self.bitmask = bitmask

    def subset(self, rows: list[int]) -> Masker | None:
        """The mask of some of this step's rows (in that order), reusing what fill() computed."""
        if not any(self.matchers[i] is not None for i in rows):
            return None
        picked = None if self.bitmask is None else self.bitmask[torch.tensor(rows)]
        return Masker([self.matchers[i] for i in rows], picked)

    def __call__(self, logits: torch.Tensor) -> None:
        """In place on [rows, vocab] logits: disallowed tokens of the guided rows become -inf."""
        self.fill(logits.shape[-1])
        xgr.apply_token_bitmask_inplace(logits, self.bitmask.to(logits.device, non_blocking=True), indices=self.rows)


def masker(matchers: list[xgr.GrammarMatcher | None]) -> Masker | None:
    """None when no row is guided: the step then does no grammar work at all."""
    return Masker(matchers) if any(m is not None for m in matchers) else None
