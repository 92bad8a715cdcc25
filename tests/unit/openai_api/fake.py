"""A frontend on a free port (in a thread) with a scripted stand-in for the Triton servers: the HTTP surface,
SSE framing, errors and usage tested with the real openai SDK in a second, without Triton."""

from __future__ import annotations

import threading
import time

import uvicorn

from llmserve.openai_api.app import create_app
from llmserve.openai_api.auth import KeyCheck
from llmserve.openai_api.prompts import Limits
from llmserve.openai_api.scripted import ScriptedEnsemble
from llmserve.openai_api.service import Service, Settings

FakeEnsemble = ScriptedEnsemble


class Frontend:
    def __init__(self, tokenizer_dir: str, port: int, fake: FakeEnsemble, keys=(), max_output_len: int = 64):
        settings = Settings(
            model="test-model",
            tokenizer_dir=tokenizer_dir,
            endpoints=["unused:1"],
            limits=Limits(max_input_len=256, max_output_len=max_output_len, default_max_tokens=16),
        )
        self.service = Service(settings, client=fake)
        self.fake, self.port = fake, port
        config = uvicorn.Config(
            create_app(self.service, KeyCheck(keys)), host="127.0.0.1", port=port, log_level="warning", loop="asyncio"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("frontend did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)
