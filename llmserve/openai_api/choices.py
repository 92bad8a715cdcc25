"""One choice of a response, built from the engine's pieces as OpenAI's deltas: its text (or tool
calls), its log-probabilities and its finish reason.

Streamed and whole responses come from the same deltas: a stream sends them as they come, a whole
response is their merge (`merge_chat`, `merge_completion`), so the two agree byte for byte.

Log probs: each piece carries its tokens' ids and log-probabilities (the ensemble's
`output_token_ids` / `output_log_probs`), and their alternatives when the request asked for some
(`top_token_ids` / `top_log_probs`); tokens.py turns ids into OpenAI's token text and bytes."""

from __future__ import annotations

from ..client.aio import Piece
from .tokens import TokenText
from .tools import HERMES, AutoParser, Reply, call, required_calls


class ChatChoice:
    """`feed(piece)` and `finish(reason)` return the deltas to send: (delta, logprob entries or None)."""

    def __init__(self, index: int, reply: Reply, tokens: TokenText, top_k: int | None):
        self.index, self.reply, self.tokens, self.top_k = index, reply, tokens, top_k
        self.buf = ""  # required: the whole reply is parsed at the end
        self.started = False  # named: the call's header went out
        self.calls = 0
        self.auto = AutoParser(HERMES, {t["function"]["name"] for t in reply.tools}) if reply.mode == "auto" else None

    def first(self) -> dict:
        """The first delta (the role)."""
        if self.reply.mode in ("named", "required"):
            return {"role": "assistant", "content": None}
        return {"role": "assistant", "content": ""}

    def feed(self, piece: Piece) -> tuple[dict, list | None]:
        entries = self._logprobs(piece)
        mode, text = self.reply.mode, piece.text
        if mode in ("text", "json"):
            return ({"content": text} if text else {}), entries
        if mode == "named":
            if not text:
                return {}, entries
            return {"tool_calls": [self._named(text)]}, entries
        if mode == "required":
            self.buf += text
            return {}, entries
        content, calls = self.auto.feed(text)
        self.calls += len(calls)
        return _delta(content, calls), entries

    def finish(self, reason: str) -> tuple[dict, str]:
        """The last delta and the finish reason (tool_calls when the reply is calls, unless cut)."""
        mode = self.reply.mode
        if mode == "named":
            delta = {} if self.started else {"tool_calls": [self._named("")]}
            return delta, reason if reason == "length" else "tool_calls"
        if mode == "required":
            calls = required_calls(self.buf)
            if calls is None:  # cut by max_tokens: what there is, as text
                return ({"content": self.buf} if self.buf else {}), reason
            return {"tool_calls": calls}, reason if reason == "length" else "tool_calls"
        if mode == "auto":
            delta = _delta(self.auto.finish(), [])
            return delta, ("tool_calls" if self.calls and reason != "length" else reason)
        return {}, reason

    def _named(self, text: str) -> dict:
        if self.started:
            return {"index": 0, "function": {"arguments": text}}
        self.started = True
        return call(self.reply.function, text, 0)

    def _logprobs(self, piece: Piece) -> list | None:
        if self.top_k is None:
            return None
        t = self.tokens
        out = []
        for i, (tid, lp) in enumerate(zip(piece.ids or [], piece.logprobs or [])):
            entry = {"token": t.text_of(tid), "logprob": lp, "bytes": list(t.bytes_of(tid)), "top_logprobs": []}
            if self.top_k and piece.top_ids is not None:
                entry["top_logprobs"] = [
                    {"token": t.text_of(a), "logprob": alp, "bytes": list(t.bytes_of(a))}
                    for a, alp in zip(piece.top_ids[i][: self.top_k], piece.top_logprobs[i][: self.top_k])
                ]
            out.append(entry)
        return out


def _delta(content: str, calls: list[dict]) -> dict:
    d: dict = {}
    if content:
        d["content"] = content
    if calls:
        d["tool_calls"] = calls
    return d


def merge_chat(first: dict, deltas: list[tuple[dict, list | None]]) -> tuple[dict, dict | None]:
    """The message and the logprobs of a whole chat choice, from its deltas."""
    content = first.get("content")
    calls: dict[int, dict] = {}
    entries: list | None = None
    for delta, lp in deltas:
        if "content" in delta:
            content = (content or "") + delta["content"]
        for c in delta.get("tool_calls", []):
            have = calls.get(c["index"])
            if have is None:
                calls[c["index"]] = {k: v for k, v in c.items() if k != "index"} | {"function": dict(c["function"])}
            else:
                have["function"]["arguments"] += c["function"]["arguments"]
        if lp is not None:
            entries = (entries or []) + lp
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, ({"content": entries, "refusal": None} if entries is not None else None)


class CompletionChoice:
    """`feed(piece)` returns (text, logprobs or None) to send; `echo` prefixes the prompt."""

    def __init__(self, index: int, tokens: TokenText, top_k: int | None, echo: str | None):
        self.index, self.tokens, self.top_k = index, tokens, top_k
        self.echo = echo
        self.start = len(echo) if echo else 0  # text_offset of the first generated token, in characters
        self.generated = b""  # the bytes of the tokens so far
        self.sum_logprob, self.count = 0.0, 0

    def feed(self, piece: Piece) -> tuple[str, dict | None]:
        text = piece.text
        if self.echo is not None:
            text, self.echo = self.echo + text, None
        for lp in piece.logprobs or []:
            self.sum_logprob += lp
            self.count += 1
        return text, self._logprobs(piece)

    def flush(self) -> str:
        """The echoed prompt when no piece came."""
        text, self.echo = self.echo or "", None
        return text

    @property
    def mean_logprob(self) -> float:
        return self.sum_logprob / self.count if self.count else 0.0

    def _logprobs(self, piece: Piece) -> dict | None:
        if self.top_k is None:
            return None
        t = self.tokens
        out: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for i, (tid, lp) in enumerate(zip(piece.ids or [], piece.logprobs or [])):
            text = t.text_of(tid)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp)
            # OpenAI's: the k most likely tokens and always the sampled one.
            top = {text: lp}
            if self.top_k and piece.top_ids is not None:
                for a, alp in zip(piece.top_ids[i][: self.top_k], piece.top_logprobs[i][: self.top_k]):
                    top.setdefault(t.text_of(a), alp)
            out["top_logprobs"].append(top)
            # Characters before this token (a token inside a character starts where that character does).
            out["text_offset"].append(self.start + len(self.generated.decode("utf-8", "ignore")))
            self.generated += t.bytes_of(tid)
        return out


def merge_completion(parts: list[tuple[str, dict | None]]) -> tuple[str, dict | None]:
    text = "".join(p for p, _ in parts)
    logprobs: dict | None = None
    for _, lp in parts:
        if lp is None:
            continue
        if logprobs is None:
            logprobs = {k: [] for k in lp}
        for k, v in lp.items():
            logprobs[k].extend(v)
    return text, logprobs
