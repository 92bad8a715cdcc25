"""engine.torch.engine_process: the engine in a process of its own answers exactly as the engine on a
thread of the stub does (same tokens, same held-back responses), and a request's end (its client gone,
a `stop`, a bad guide, the engine process dying, shutdown) is answered the same way, with nothing left
running."""

import os
import signal
import threading
import time

import pytest

from llmserve.engine.null_model import NULL_STEP_ENV
from llmserve.engine.sampling import SamplingParams
from llmserve.errors import EngineBusy, EngineUnavailable, RequestError
from llmserve.finish import FinishReason
from llmserve.pipeline.engine_service import separate_process
from llmserve.request.guided import Guide
from llmserve.request.token_request import EngineRequest

from .test_engine_service import _options, _run, _service


def _request(n: int) -> EngineRequest:
    return EngineRequest(
        prompt=[1, 2, 3],
        params=SamplingParams(max_new_tokens=n, min_tokens=n),
        streaming=True,
        exclude_input_in_output=True,
        return_log_probs=False,
    )


class _Client:
    """send() of one request: what arrived, and an event for the final response."""

    def __init__(self):
        self.got, self.final, self.done, self.responses = [], None, threading.Event(), 0

    def __call__(self, outputs, final, failure=None, message=None):
        self.responses += 1
        if outputs is not None:
            self.got += outputs["output_ids"].reshape(-1).tolist()
        if final:
            self.final = (failure, message)
            self.done.set()


def _until(check, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def in_process(tiny_llama):
    service = _service(tiny_llama)
    yield service
    service.shutdown()


def _separate(tiny_llama, env: dict[str, str] | None = None):
    """A service whose engine runs in a process of its own; `env` for the engine process only (it
    copies the environment when it starts)."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        service = _service(tiny_llama, engine_process=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    yield service
    service.shutdown()
    assert not service.engine.proc.is_alive()  # nothing left running


@pytest.fixture(scope="module")
def separate(tiny_llama):
    yield from _separate(tiny_llama)


# The null model (engine/null_model.py) at 100 ms a step (wall time, whatever the load): a request of 30
# tokens runs 3 s, long enough to be ended half way on a loaded machine.
SLOW = {NULL_STEP_ENV: "100"}


@pytest.fixture(scope="module")
def slow(tiny_llama):
    yield from _separate(tiny_llama, SLOW)


@pytest.fixture
def doomed(tiny_llama):
    """Its own engine process: the test kills it."""
    yield from _separate(tiny_llama, SLOW)


def test_the_same_tokens_and_the_same_held_back_responses_as_in_the_stubs_process(in_process, separate):
    pattern = [False, True, True, True, False, True]
    assert _run(separate, []) == _run(in_process, [])
    held = _run(separate, pattern)
    assert held == _run(in_process, pattern)
    assert len(held[1]) == 4  # three steps held back, then sent together


def test_a_client_that_went_away_is_freed_by_the_engine_process(slow):
    client, gone = _Client(), threading.Event()
    slow.submit(_request(30), client, gone.is_set)
    assert _until(lambda: client.got)
    gone.set()  # the poller asks, tells the child, which frees the slot at its next step
    assert client.done.wait(60)
    assert client.final[0] is FinishReason.CANCELLED and len(client.got) < 30
    assert _until(lambda: slow.engine.stats.cancelled == 1 and slow.engine.stats.running == 0)


def test_a_stop_ends_the_request_with_what_it_generated(slow):
    client = _Client()
    slow.submit(_request(30), client, lambda: False, key="llmserve-7")
    assert _until(lambda: client.got)
    assert slow.stop("llmserve-7")
    assert client.done.wait(60)
    assert client.final == (None, None) and 0 < len(client.got) < 30  # a normal final response


def test_a_full_queue_refuses_after_submit_returned_and_the_others_are_served(slow):
    """submit() does not wait for the child: the request the child's full queue refuses is answered
    through `refuse` with the EngineBusy a raise would have carried; every other request completes, and
    a stop for the refused one's key finds nothing."""
    n = 2 + 8 + 3  # two running (max_batch_size), eight waiting (max_queue_size), three over
    clients, refusals = [_Client() for _ in range(n)], {}
    for i, client in enumerate(clients):
        slow.submit(
            _request(3), client, lambda: False, key=f"full-{i}", refuse=lambda e, i=i: refusals.setdefault(i, e)
        )
    assert _until(lambda: len(refusals) + sum(c.done.is_set() for c in clients) == n, 120)
    assert refusals, "some request should have found the queue full"
    assert all(isinstance(e, EngineBusy) and "max_queue_size" in str(e) for e in refusals.values())
    for i, client in enumerate(clients):
        if i in refusals:
            assert client.responses == 0  # answered by refuse alone
            assert not slow.stop(f"full-{i}")  # its stop registration went with it
        else:
            assert client.final == (None, None) and len(client.got) == 3


def test_a_bad_guide_is_refused_before_the_engine_and_a_good_one_is_compiled_there(separate):
    with pytest.raises(RequestError, match="guide"):
        separate.compile(Guide("regex", "(unclosed"))
    ref = separate.compile(Guide("regex", "[ab]+"))
    assert (ref.guide_type, ref.guide) == ("regex", "[ab]+")


def test_a_dead_engine_process_fails_its_requests_and_the_server_is_not_ready(doomed):
    client = _Client()
    doomed.submit(_request(30), client, lambda: False)
    assert _until(lambda: client.got)
    os.kill(doomed.engine.proc.pid, signal.SIGKILL)
    assert client.done.wait(60)
    assert client.final[0] is FinishReason.ERROR and "engine process ended" in client.final[1]
    assert "engine process ended" in doomed.engine.health()
    with pytest.raises(EngineUnavailable, match="engine process ended"):
        doomed.submit(_request(4), _Client(), lambda: False)


def test_auto_puts_the_engine_in_a_process_of_its_own_only_for_a_gpu(tiny_llama):
    assert not separate_process(_options(tiny_llama, "auto"))  # device cpu
    assert separate_process(_options(tiny_llama, "true")) and not separate_process(_options(tiny_llama, "false"))


def test_a_request_that_is_not_streamed_gets_one_answer_with_every_token(in_process, separate):
    def answer(service):
        client = _Client()
        req = _request(12)
        req.streaming = False
        service.submit(req, client, lambda: False)
        assert client.done.wait(60)
        return client.got, client.final, client.responses

    assert answer(separate) == answer(in_process)
    got, final, responses = answer(separate)
    assert len(got) == 12 and final == (None, None) and responses == 1
