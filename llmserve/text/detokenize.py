"""postprocessing: exact detokenization, streamed or not, without per-request state.

Decoding each streamed chunk on its own breaks multi-byte characters and SentencePiece spaces
(upstream's most reported streaming bug). A stateful `DecodeStream` per request cannot live in
postprocessing: an ensemble calls it once per streamed response, and Triton refuses to feed it a
request key from preprocessing ("receives inputs originated from different decoupled models").
So the torch engine sends, with each chunk, the few output tokens that precede it
(`output_context_ids`), and the chunk's text is

    visible(context + chunk) - visible(context)

where visible() decodes and drops a trailing incomplete character (U+FFFD from bytes still
waiting for the rest of their character). Non-streamed output is visible(all tokens). The sum of
the chunks therefore equals the non-streamed text byte for byte, including a generation cut in
the middle of a character (both drop the incomplete bytes). The engine's stop-word matcher, which
does keep state per request, uses DecodeStream (llmserve/text/stop_words.py).

SentencePiece tokenizers with byte fallback (Llama 2, Mistral: tokens "<0xE4>" for bytes the
vocabulary lacks) need two more cuts, because their decoder turns a whole run of byte tokens into
U+FFFD as soon as one byte of the run is invalid, so "你" followed by the first byte of "好" decodes
to four U+FFFD, not "你" plus one: visible() leaves out the byte tokens of an incomplete last
character before decoding, and a context that starts inside a character (orphan continuation bytes)
loses those leading byte tokens. Exact for any output that is valid UTF-8, cut anywhere. Limit: a
run of byte tokens that is not valid UTF-8 at all (random weights, not real models) decodes to
U+FFFD as a whole in the non-streamed text, while a stream may already have shown its valid bytes."""

from __future__ import annotations

from tokenizers import Tokenizer

INCOMPLETE = "\ufffd"


class Detokenizer:
    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self.tok = tokenizer
        self.skip = skip_special_tokens
        # Byte-fallback tokens ("<0xNN>") -> their byte; empty for byte-level BPE and WordPiece.
        self.byte_of = {tid: b for b in range(256) if (tid := tokenizer.token_to_id(f"<0x{b:02X}>")) is not None}

    def visible(self, ids: list[int]) -> str:
        ids = self._complete(list(ids))
        return self.tok.decode(ids, skip_special_tokens=self.skip).rstrip(INCOMPLETE) if ids else ""

    def decode(self, ids: list[int], context: list[int] = ()) -> str:
        """Text that `ids` add after `context` (tokens of the same output already turned into text)."""
        context = self._from_char_start(list(context))
        if not context:
            return self.visible(ids)
        return self._new_text(self.visible(context), self.visible(context + list(ids)))

    def decode_many(self, items: list[tuple[list[int], list[int]]]) -> list[str]:
        """decode(ids, context) of every (ids, context) pair, in two tokenizer calls for all of them
        (postprocessing's dynamic batch: one call per chunk costs more than the decoding itself)."""
        items = [(list(i), self._from_char_start(list(c))) for i, c in items]
        texts = self.tok.decode_batch(
            [self._complete(c + i) for i, c in items] + [self._complete(c) for _, c in items],
            skip_special_tokens=self.skip,
        )
        n = len(items)
        out = []
        for k, (ids, context) in enumerate(items):
            after = texts[k].rstrip(INCOMPLETE) if (context or ids) else ""
            before = texts[n + k].rstrip(INCOMPLETE) if context else ""
            out.append(self._new_text(before, after) if context else after)
        return out

    @staticmethod
    def _new_text(before: str, after: str) -> str:
        if after.startswith(before):
            return after[len(before) :]
        # Not expected for byte-level BPE, SentencePiece or WordPiece decoders; keep what is new.
        same = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        return after[same:]

    def _complete(self, ids: list[int]) -> list[int]:
        """`ids` without the byte tokens of an incomplete last UTF-8 character (byte fallback)."""
        if not self.byte_of or not ids or ids[-1] not in self.byte_of:
            return ids
        for back in range(1, min(4, len(ids)) + 1):  # a character has at most 4 bytes
            tid = ids[-back]
            if tid not in self.byte_of:
                return ids
            b = self.byte_of[tid]
            if b & 0xC0 != 0x80:  # not a continuation byte: the start of the last character
                need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
                return ids[:-back] if need > back else ids
        return ids

    def _from_char_start(self, context: list[int]) -> list[int]:
        """A context cut inside a character starts with continuation bytes: drop them (byte fallback)."""
        start = 0
        while start < len(context) and start < 3 and self.byte_of.get(context[start], 0) & 0xC0 == 0x80:
            start += 1
        return context[start:]
