"""From a request to prompts: the token count equals the tokenizer's own (what preprocessing counts),
and a short request is built on the event loop, a long one in a thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from llmserve.openai_api.prompts import Limits, PromptBuilder
from llmserve.openai_api.protocol import CompletionRequest
from llmserve.openai_api.scripted import ScriptedEnsemble
from llmserve.openai_api.service import INLINE_BUILD_BYTES, Service, Settings
from llmserve.spec import ROOT, load_spec

TOKENIZER = str(load_spec(ROOT / "specs" / "default.yaml").checkpoint_path())
LIMITS = Limits(max_input_len=8192, max_output_len=64, default_max_tokens=16)


@pytest.mark.parametrize("special", [False, True])
def test_count_equals_the_tokenizers_own_call(special):
    b = PromptBuilder(TOKENIZER, LIMITS, add_special_tokens=special)
    for text in ["Hello world", " leading space", "你好🌊 mixed ünïcode\n\ttabs", "<|im_start|>user\nhi<|im_end|>"]:
        assert b.count(text) == len(b.tok(text, add_special_tokens=special)["input_ids"]), text


def test_short_requests_are_built_on_the_loop_and_long_ones_in_a_thread():
    service = Service(Settings("m", TOKENIZER, ["unused:1"], LIMITS), client=ScriptedEnsemble())
    threads = []
    build = service.builder.build

    def spy(*args):
        threads.append(threading.get_ident())
        return build(*args)

    service.builder.build = spy

    async def prepare(prompt: str) -> int:
        data = {"model": "m", "prompt": prompt}
        _, prompts, _ = await service.prepare(CompletionRequest, data, len(prompt) + 30)
        return prompts[0].tokens

    async def main():
        loop_thread = threading.get_ident()
        short = "word " * 10
        assert await prepare(short) == service.builder.count(short) > 0
        long = "word " * (INLINE_BUILD_BYTES // 5 + 10)
        assert await prepare(long) == service.builder.count(long)
        return loop_thread

    loop_thread = asyncio.run(main())
    assert threads[0] == loop_thread and threads[1] != loop_thread
