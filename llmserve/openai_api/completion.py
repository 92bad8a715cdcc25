"""One API request's choices: an engine request (service.Run) per choice and prompt, run in
parallel, their pieces merged into OpenAI's chunks or into one whole response.

Indexes as OpenAI numbers them: chat choices 0..n-1; completions prompt-major (prompt i's choices
are i*n .. i*n+n-1). `best_of` (completions, not streamed) generates best_of per prompt and keeps
the n with the highest mean log-probability per token, as OpenAI describes it. Usage: every prompt
once, every generated token (the best_of candidates not returned included: they were generated).

Events: `events()` yields (choice index, piece) as pieces arrive from any run and (index, None)
when that run ended; the whole response is built from the same deltas a stream sends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

from .choices import ChatChoice, CompletionChoice, merge_chat, merge_completion
from .protocol import ChatCompletionRequest
from .responses import usage
from .service import Run, Service
from .tools import Reply


class Completion:
    def __init__(self, service: Service, req, prompts, reply: Reply, request_id: str, arrival: float):
        self.req, self.prompts, self.reply = req, prompts, reply
        self.chat = isinstance(req, ChatCompletionRequest)
        per_prompt = req.choices if self.chat else req.candidates
        single = len(prompts) * per_prompt == 1
        self.runs: list[Run] = []
        self.builders: list[ChatChoice | CompletionChoice] = []
        top_k = req.top_k_logprobs
        for p, prompt in enumerate(prompts):
            for j in range(per_prompt):
                k = len(self.runs)
                # The Triton request id must be unique while it runs (a stop names it).
                rid = request_id if single else f"{request_id}-c{k}"
                self.runs.append(Run(service, req, prompt, rid, arrival, choice=j, guide=reply.guide))
                if self.chat:
                    self.builders.append(ChatChoice(k, reply, service.token_text, top_k))
                else:
                    echo = prompt.text if req.echo else None
                    self.builders.append(CompletionChoice(p * per_prompt + j, service.token_text, top_k, echo))

    def usage(self) -> dict:
        return usage(sum(p.tokens for p in self.prompts), sum(r.completion_tokens for r in self.runs))

    async def events(self) -> AsyncIterator[tuple[int, object]]:
        """(run index, piece) and (run index, None) at each run's end, as they come."""
        if len(self.runs) == 1:
            async with aclosing(self.runs[0].pieces()) as pieces:
                async for piece in pieces:
                    yield 0, piece
            yield 0, None
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(k: int, run: Run):
            try:
                async with aclosing(run.pieces()) as pieces:
                    async for piece in pieces:
                        await queue.put((k, piece, None))
                await queue.put((k, None, None))
            except Exception as e:  # to the consumer, which cancels the other runs
                await queue.put((k, None, e))

        tasks = [asyncio.ensure_future(pump(k, r)) for k, r in enumerate(self.runs)]
        try:
            left = len(tasks)
            while left:
                k, piece, error = await queue.get()
                if error is not None:
                    raise error
                if piece is None:
                    left -= 1
                yield k, piece
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- a whole response ------------------------------------------------------------------------
    async def whole(self) -> tuple[list[dict], dict]:
        deltas: list[list] = [[] for _ in self.runs]
        async with aclosing(self.events()) as events:  # a cancel (client gone) stops every run now
            async for k, piece in events:
                if piece is not None:
                    deltas[k].append(self.builders[k].feed(piece))
        choices = []
        for k, b in enumerate(self.builders):
            if self.chat:
                last, reason = b.finish(self.runs[k].finish_reason)
                message, logprobs = merge_chat(b.first(), deltas[k] + [(last, None)])
                choices.append({"index": b.index, "message": message, "logprobs": logprobs, "finish_reason": reason})
            else:
                parts = deltas[k] + [(b.flush(), None)]
                text, logprobs = merge_completion(parts)
                choices.append(
                    {
                        "index": b.index,
                        "text": text,
                        "logprobs": logprobs,
                        "finish_reason": self.runs[k].finish_reason,
                        "_score": b.mean_logprob,
                    }
                )
        if not self.chat:
            choices = self._best(choices)
        return sorted(choices, key=lambda c: c["index"]), self.usage()

    def _best(self, choices: list[dict]) -> list[dict]:
        n, per_prompt = self.req.choices, self.req.candidates
        out = []
        for p in range(len(self.prompts)):
            group = choices[p * per_prompt : (p + 1) * per_prompt]
            if per_prompt > n:
                group = sorted(group, key=lambda c: -c["_score"])[:n]
            for rank, c in enumerate(group):
                c.pop("_score")
                out.append(c | {"index": p * n + rank})
        return out
