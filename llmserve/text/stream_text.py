"""One generation's streamed text, kept where the stream is read: the OpenAI frontend's token-level path.

The ensemble detokenizes in postprocessing, which cannot keep state per stream (text/detokenize.py).
A frontend that reads the token-level model itself holds the whole stream in one process, so it
decodes incrementally (`DecodeStream`, one step per token, through StopMatcher) and matches OpenAI's
`stop` strings on the same text: text that may still grow into a stop string is held back, and on a
match the tokens from the one that reaches into it are dropped (the ensemble's text matching, the
same StopMatcher). The sum of the released pieces is the decoding of the kept tokens, less an
incomplete last character, as the ensemble's text is.

`generated` keeps every token the engine sent (released or held), so a stream resumed on another
server continues from exactly those tokens (client/retry.py `TokenAttempts`)."""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer

from .stop_words import StopMatcher


@dataclass
class Released:
    """What a push lets out: text, and the tokens behind it (ids, log-probabilities where sent)."""

    text: str
    ids: list[int]
    logprobs: list[float] | None


class StreamText:
    def __init__(self, tokenizer: Tokenizer, stop_words: list[str], skip_special_tokens: bool = True):
        self.matcher = StopMatcher(tokenizer, stop_words, skip_special_tokens)
        self.generated: list[int] = []
        self.logprobs: list[float] = []
        self.pieces: list[str] = []  # per generated token, the text it added
        self.released = 0  # tokens handed out
        self.stopped = False  # a stop string matched: the engine's request must be stopped
        self.has_logprobs = False  # the engine sends them (the request asked: return_log_probs)

    @property
    def has_stops(self) -> bool:
        return bool(self.matcher.stop_words)

    def push(self, ids: list[int], logprobs: list[float] | None) -> Released | None:
        """One engine response's tokens. Returns what may be streamed now (None: nothing yet)."""
        if self.stopped:
            return None
        m = self.matcher
        self.has_logprobs |= logprobs is not None
        for i, tok in enumerate(ids):
            keep = m.push(tok)
            self.generated.append(tok)
            self.pieces.append(m.piece)
            self.logprobs.append(float(logprobs[i]) if logprobs is not None and i < len(logprobs) else 0.0)
            if keep is not None:
                del self.generated[keep:], self.pieces[keep:], self.logprobs[keep:]
                self.stopped = True
                break
        upto = len(self.generated) if self.stopped or not self.has_stops else m.safe_tokens()
        return self._release(upto)

    def finish(self) -> Released | None:
        """The stream ended: whatever was held back."""
        return self._release(len(self.generated))

    def _release(self, upto: int) -> Released | None:
        start = self.released
        if upto <= start:
            return None
        self.released = upto
        return Released(
            "".join(self.pieces[start:upto]),
            self.generated[start:upto],
            self.logprobs[start:upto] if self.has_logprobs else None,
        )
