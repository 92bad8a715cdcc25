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
does keep state per request, uses DecodeStream (llmserve/text/stop_words.py)."""

from __future__ import annotations

from tokenizers import Tokenizer

INCOMPLETE = "\ufffd"


class Detokenizer:
    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self.tok = tokenizer
        self.skip = skip_special_tokens

    def visible(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=self.skip).rstrip(INCOMPLETE) if ids else ""

    def decode(self, ids: list[int], context: list[int] = ()) -> str:
        """Text that `ids` add after `context` (tokens of the same output already turned into text)."""
        if not context:
            return self.visible(ids)
        return self._new_text(self.visible(list(context)), self.visible(list(context) + list(ids)))

    def decode_many(self, items: list[tuple[list[int], list[int]]]) -> list[str]:
        """decode(ids, context) of every (ids, context) pair, in two tokenizer calls for all of them
        (postprocessing's dynamic batch: one call per chunk costs more than the decoding itself)."""
        texts = self.tok.decode_batch([list(c) + list(i) for i, c in items] + [list(c) for _, c in items],
                                      skip_special_tokens=self.skip)
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
            return after[len(before):]
        # Not expected for byte-level BPE, SentencePiece or WordPiece decoders; keep what is new.
        same = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        return after[same:]
