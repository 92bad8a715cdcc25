"""Stop words matched on text, not tokens: a stop word tokenized alone ("\\n\\nUser") is rarely the
same token sequence the model generates in context. Tokens are decoded incrementally (DecodeStream),
each token's end offset in the text is kept, and the matcher tells

- where a stop string starts (generation ends; tokens from the one that reaches into it are dropped,
  so a stop word never appears in the output), and
- how many tokens are safe to stream now: text that could still grow into a stop word is held back."""

from __future__ import annotations

from bisect import bisect_right

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


class StopMatcher:
    def __init__(self, tokenizer: Tokenizer, stop_words: list[str], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.stop_words = [w for w in stop_words if w]
        self.longest = max((len(w) for w in self.stop_words), default=0)
        self.stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self.text = ""
        self.ends: list[int] = []  # ends[i]: len(text) after token i

    def push(self, token_id: int) -> int | None:
        """Add one generated token. Returns the number of tokens to keep if a stop word now
        appears (generation must end), else None."""
        piece = self.stream.step(self.tokenizer, token_id)
        before = len(self.text)
        self.text += piece or ""
        self.ends.append(len(self.text))
        if not piece:
            return None
        window_start = max(0, before - self.longest + 1)
        hits = [i for w in self.stop_words if (i := self.text.find(w, window_start)) >= 0]
        if not hits:
            return None
        # Keep the tokens whose text ends at or before the stop word's first character.
        return bisect_right(self.ends, min(hits))

    def safe_tokens(self) -> int:
        """How many tokens can be streamed without risking a partial stop word."""
        hold = 0
        for w in self.stop_words:
            for k in range(min(len(w) - 1, len(self.text)), hold, -1):
                if self.text.endswith(w[:k]):
                    hold = k
                    break
        return bisect_right(self.ends, len(self.text) - hold) if hold else len(self.ends)
