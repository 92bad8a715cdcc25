"""EngineService's streamed responses: tokens held back while the previous response is still being
sent travel with the next one, and every token arrives exactly once, in order."""

import threading

from llmserve.engine.sampling import SamplingParams
from llmserve.pipeline.engine_service import EngineService
from llmserve.pipeline.options import EngineOptions
from llmserve.request.token_request import EngineRequest


def _service(path, engine_process: bool = False) -> EngineService:
    return EngineService(_options(path, "true" if engine_process else "false"))


def _options(path, engine_process: str) -> EngineOptions:
    return EngineOptions(
        checkpoint_dir=str(path),
        device="cpu",
        dtype="float32",
        threads=0,
        cuda_graphs=False,
        triton_kernels=False,
        stream_interval_ms=0,
        send_threads=2,
        engine_process=engine_process,
        prefill_token_budget=2048,
        max_batch_size=2,
        max_input_len=32,
        max_output_len=32,
        exclude_input_in_output=True,
        skip_special_tokens=True,
        max_queue_size=8,
        request_timeout_s=60,
        cancellation_check_period_ms=100,
    )


def _stream(service, max_new_tokens: int, record, **submit_kw) -> list:
    """Submit one streamed request of max_new_tokens and wait for its final response; what
    record(outputs) makes of each response, in order."""
    got, done = [], threading.Event()
    req = EngineRequest(
        prompt=[1, 2, 3],
        params=SamplingParams(max_new_tokens=max_new_tokens),
        streaming=True,
        exclude_input_in_output=True,
        return_log_probs=False,
    )

    def send(outputs, final, failure=None, message=None):
        got.append(record(outputs))
        if final:
            done.set()

    service.submit(req, send, lambda: False, **submit_kw)
    assert done.wait(120)
    return got


def _run(service, backlog_pattern):
    busy = iter(backlog_pattern)
    return _stream(
        service,
        12,
        lambda outputs: outputs["output_ids"].reshape(-1).tolist() if outputs else None,
        backlogged=lambda: next(busy, False),
    )


def test_backlogged_tokens_travel_with_the_next_response(tiny_llama):
    service = _service(tiny_llama)
    try:
        every = _run(service, [])
        held = _run(service, [False, True, True, True, False, True])
    finally:
        service.shutdown()
    assert [len(c) for c in every] == [1] * 12
    assert sum(held, []) == sum(every, [])  # the same tokens, fewer responses
    assert len(held) < len(every) and len(held[1]) == 4  # three steps held back, then sent together


def test_the_echo_travels_with_every_response_that_carries_tokens(tiny_llama):
    """The request_key comes back with each chunk, so the postprocessing step that sees a cancel can
    name the generation in its `stop` (pipeline/cancellation.py)."""
    import numpy as np

    service = _service(tiny_llama)
    key = np.array([[b"llmserve-1"]], dtype=object)
    try:
        got = _stream(service, 5, lambda outputs: outputs, key="llmserve-1", echo={"request_key": key})
    finally:
        service.shutdown()
    assert got and all(o["request_key"] is key for o in got if o is not None)
