"""Stop words, matched two ways.

As token sequences (`ends_with_any`), TensorRT-LLM's way and the default (contract.STOP_WORDS_MATCH):
generation ends when the generated tokens end with one word's ids (each word tokenized alone by
preprocessing), and the word's tokens stay in the output.

On text (`StopMatcher`), the explicit option and the OpenAI API's semantics: a stop word tokenized alone ("\\n\\nUser") is rarely the
same token sequence the model generates in context. Tokens are decoded incrementally (DecodeStream),
each token's end offset in the text is kept, and the matcher tells

- where a stop string starts (generation ends; tokens from the one that reaches into it are dropped,
  so a stop word never appears in the output), and
- how many tokens are safe to stream now: text that could still grow into a stop word is held back.

Matching runs an Aho-Corasick automaton over the decoded characters, so a token costs O(its text)
amortised whatever the number and length of the stop words, and the held-back length is the depth of
the automaton's state (the longest suffix of the text that is a prefix of some stop word). Building
the automaton costs O(total stop-word characters) once per request; the edges cap that total
(request/word_lists.py)."""

from __future__ import annotations

from bisect import bisect_right

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


def ends_with_any(generated: list[int], sequences: list[list[int]]) -> bool:
    """Whether the generated tokens end with one of the sequences (a few short words: a plain scan)."""
    return any(len(generated) >= len(w) and generated[-len(w) :] == w for w in sequences)


class StopAutomaton:
    """Aho-Corasick over characters. State 0 is the root (empty suffix)."""

    def __init__(self, words: list[str]):
        self.children: list[dict[str, int]] = [{}]
        self.depth = [0]
        self.match = [0]  # longest stop word that ends at this state (via suffix links); 0: none
        for w in words:
            s = 0
            for ch in w:
                nxt = self.children[s].get(ch)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[s][ch] = nxt
                    self.children.append({})
                    self.depth.append(self.depth[s] + 1)
                    self.match.append(0)
                s = nxt
            self.match[s] = len(w)
        self.fail = [0] * len(self.children)
        queue = list(self.children[0].values())
        for s in queue:  # breadth first: a state's suffix link is shallower than the state
            for ch, t in self.children[s].items():
                f = self.fail[s]
                while f and ch not in self.children[f]:
                    f = self.fail[f]
                link = self.children[f].get(ch, 0)
                self.fail[t] = link if link != t else 0
                self.match[t] = max(self.match[t], self.match[self.fail[t]])
                queue.append(t)

    def step(self, state: int, ch: str) -> int:
        children, fail = self.children, self.fail
        while state and ch not in children[state]:
            state = fail[state]
        return children[state].get(ch, 0)


class StopMatcher:
    def __init__(self, tokenizer: Tokenizer, stop_words: list[str], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.stop_words = [w for w in stop_words if w]
        self.automaton = StopAutomaton(self.stop_words)
        self.state = 0
        self.stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self.length = 0  # characters decoded so far (the text itself is not kept)
        self.ends: list[int] = []  # ends[i]: text length after token i
        self.piece = ""  # the text the last pushed token added (for a caller that streams the text itself)

    def push(self, token_id: int) -> int | None:
        """Add one generated token. Returns the number of tokens to keep if a stop word now
        appears (generation must end), else None."""
        piece = self.piece = self.stream.step(self.tokenizer, token_id) or ""
        a, state, first = self.automaton, self.state, None
        for i, ch in enumerate(piece, start=self.length):
            state = a.step(state, ch)
            if a.match[state]:
                start = i - a.match[state] + 1
                first = start if first is None else min(first, start)
        self.state = state
        self.length += len(piece)
        self.ends.append(self.length)
        if first is None:
            return None
        # Keep the tokens whose text ends at or before the stop word's first character.
        return bisect_right(self.ends, first)

    def safe_tokens(self) -> int:
        """How many tokens can be streamed without risking a partial stop word."""
        hold = self.automaton.depth[self.state]
        return bisect_right(self.ends, self.length - hold) if hold else len(self.ends)
