"""Token ids -> what OpenAI's `logprobs` show for each token: its bytes and its text.

A token's bytes come from its vocabulary string, not from decoding it alone: decoding one token of
a multi-byte character gives U+FFFD, while its bytes are what a client needs to rebuild the text
(OpenAI's `bytes`). Byte-level BPE vocabularies (GPT-2, Llama 3, SmolLM2, Qwen) spell each byte as
one printable character (`bytes_to_unicode`); SentencePiece vocabularies spell a space as U+2581 and
bytes missing from the vocabulary as `<0xNN>`. For any other vocabulary the token's own decoding is
used. A token whose bytes are not valid UTF-8 on their own is shown as `bytes:\\xNN...`, as OpenAI
shows such tokens."""

from __future__ import annotations

import json
from functools import lru_cache


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    # GPT-2's byte <-> printable character table (the same table every byte-level BPE tokenizer uses).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class TokenText:
    """`bytes_of(id)` and `text_of(id)` for one tokenizer (transformers' fast tokenizer)."""

    def __init__(self, hf_tokenizer):
        self.tok = hf_tokenizer
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        decoder = json.loads(backend.to_str()).get("decoder") if backend is not None else None
        kinds = _decoder_kinds(decoder)
        self.byte_level = "ByteLevel" in kinds
        self.sentencepiece = "ByteFallback" in kinds or "Metaspace" in kinds
        self.special = set(hf_tokenizer.all_special_ids)
        self._cache: dict[int, bytes] = {}

    def bytes_of(self, token_id: int) -> bytes:
        b = self._cache.get(token_id)
        if b is None:
            b = self._cache[token_id] = self._bytes(token_id)
        return b

    def _bytes(self, token_id: int) -> bytes:
        piece = self.tok.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if token_id in self.special:
            return piece.encode("utf-8")
        if self.byte_level:
            table = _byte_decoder()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        if self.sentencepiece:
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                return bytes([int(piece[3:5], 16)])
            return piece.replace("\u2581", " ").encode("utf-8")
        return self.tok.decode([token_id]).encode("utf-8")

    def text_of(self, token_id: int) -> str:
        b = self.bytes_of(token_id)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{x:02x}" for x in b)


def _decoder_kinds(decoder) -> set[str]:
    if not isinstance(decoder, dict):
        return set()
    kinds = {decoder.get("type")}
    for d in decoder.get("decoders") or []:
        kinds |= _decoder_kinds(d)
    return kinds
