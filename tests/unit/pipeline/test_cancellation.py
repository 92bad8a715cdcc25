"""pipeline/cancellation.py: the is_cancelled() throttle honours its period (from the spec's
cancellation_check_period_ms), the stop request is built in one place, and the request id -> cancel
registry forgets every request that ends."""

import threading

import numpy as np
import pytest

from llmserve.contract import REQUEST_KEY
from llmserve.errors import RequestError
from llmserve.pipeline.cancellation import (
    NO_REQUEST_ID,
    CancelRegistry,
    CancelRelay,
    PollThrottle,
    edge_key,
    key_tensor,
    request_key,
    send_stop,
    stop_inputs,
)
from llmserve.pipeline.options import PostprocessOptions, RelayOptions

from ..trtllm.test_config import make_spec
from .fake_pb import FakePb, InferenceResponse, Request, TritonError


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_throttle_honours_the_period():
    clock = Clock()  # steps of 1/8 s: exact in binary floating point
    polls = PollThrottle.from_ms(250, clock=clock)
    assert polls.period_s == 0.25
    assert polls.due("a")  # a key's first call asks
    clock.now += 0.125
    assert not polls.due("a")
    assert polls.due("b")  # keys are independent
    clock.now += 0.125
    assert polls.due("a") and not polls.due("a")  # a whole period after the last ask
    assert not polls.due("b")  # b asked 1/8 s ago
    clock.now += 0.125
    assert polls.due("b")


def test_throttle_started_waits_a_whole_period_first():
    clock = Clock()
    polls = PollThrottle(0.1, clock=clock)
    polls.start()
    assert not polls.due()
    clock.now += 0.1
    assert polls.due()


def test_throttle_forgets_old_keys():
    polls = PollThrottle(10, max_keys=8, clock=Clock())
    for i in range(100):
        polls.due(str(i))
    assert len(polls) <= 8
    assert not polls.due("99")  # the most recent ones are kept


@pytest.mark.parametrize("options", [RelayOptions, PostprocessOptions])
def test_period_comes_from_the_spec_through_the_config(tmp_path, options):
    spec = make_spec(tmp_path, trt={"cancellation_check_period_ms": 250})
    opts = options.from_spec(spec, "tok")
    params = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in opts.to_params().items()}
    assert params["cancellation_check_period_ms"] == "250"
    assert options.from_params(params).cancellation_check_period_ms == 250


def stopping_model(errors=()):
    def answer(bls):
        return [InferenceResponse(error=TritonError(e)) for e in errors] or [InferenceResponse()]

    return answer


def test_stop_request_is_upstreams():
    pb = FakePb({"tensorrt_llm": stopping_model()})
    assert send_stop(pb, "tensorrt_llm", "r1")
    (call,) = pb.calls
    assert (call.model_name, call.request_id, call.requested_output_names) == ("tensorrt_llm", "r1", ["output_ids"])
    assert [t.name() for t in call.inputs] == [t.name() for t in stop_inputs(pb)]
    assert call.input("stop").tolist() == [[True]] and call.input("input_ids").shape == (1, 1)


def test_a_failing_stop_never_raises(caplog):
    def broken(bls):
        raise RuntimeError("stub gone")

    assert not send_stop(FakePb({"m": broken}), "m", "r1")
    assert not send_stop(FakePb({"m": stopping_model(["no such request"])}), "m", "r1")
    assert "stub gone" in caplog.text and "no such request" in caplog.text


def NO_KEY(name):  # a step without the request_key input (a direct caller of postprocessing)
    return None


def _key(key: str):
    return lambda name: key_tensor(key) if name == REQUEST_KEY else None


def test_the_edge_keeps_a_client_id_and_mints_a_unique_one_otherwise():
    assert edge_key("client-7") == "client-7"
    minted = {edge_key("") for _ in range(1000)}
    assert len(minted) == 1000 and all(minted)


def test_the_key_is_the_request_key_input_when_sent_else_the_request_id():
    assert request_key(_key("llmserve-abc"), "") == "llmserve-abc"
    assert request_key(_key("llmserve-abc"), "client") == "llmserve-abc"
    assert request_key(NO_KEY, "client") == "client"
    with pytest.raises(RequestError, match=REQUEST_KEY):
        request_key(lambda name: np.array([[b"\xff"]], dtype=object), "")


def test_a_cancelled_step_without_a_client_id_stops_its_generation_by_its_key():
    """tritonclient's default: no request id. The key preprocessing minted, echoed by the engine, is
    what the stop names (docs/cancellation.md)."""
    pb = FakePb({"tensorrt_llm": stopping_model()})
    relay = CancelRelay(pb, 0)
    request = Request({}, request_id="")
    request.cancelled = True
    assert relay.cancelled(request, _key("llmserve-1"))
    assert [c.request_id for c in pb.calls] == ["llmserve-1"]
    assert relay.cancelled(request, lambda name: np.array([[b"\xff"]], dtype=object)) is False  # no key: no stop


def test_cancel_relay_polls_once_per_period_and_stops_once():
    clock = Clock()
    pb = FakePb({"tensorrt_llm": stopping_model()})
    relay = CancelRelay(pb, 0.25, clock=clock)
    request = Request({}, request_id="r1")
    assert not relay.cancelled(request, NO_KEY) and request.polls == 1
    clock.now += 0.125
    assert not relay.cancelled(request, NO_KEY) and request.polls == 1  # within the period: not asked
    request.cancelled = True
    clock.now += 0.125
    assert relay.cancelled(request, NO_KEY) and request.polls == 2
    assert relay.cancelled(request, NO_KEY) and request.polls == 2  # known: neither asked again nor stopped again
    assert [c.request_id for c in pb.calls] == ["r1"]
    assert not relay.cancelled(Request({}, request_id=""), NO_KEY)  # no id: nothing to stop


def test_registry_runs_every_hook_of_an_id_and_forgets_finished_requests():
    registry, stopped = CancelRegistry(), []
    with registry.registered("r1", lambda: stopped.append("a")):
        with pytest.raises(KeyError):
            with registry.registered("r1", lambda: stopped.append("b")):
                assert len(registry) == 1
                assert registry.stop("r1") == 2
                raise KeyError("the request failed")  # still removed
        assert registry.stop("r1") == 1
    assert len(registry) == 0 and sorted(stopped) == ["a", "a", "b"]
    assert registry.stop("r1") == 0  # finished already: not an error
    registry.add("", lambda: None)
    assert len(registry) == 0  # an empty id cannot be named by a stop
    with pytest.raises(ValueError, match=NO_REQUEST_ID):
        registry.stop("")


def test_a_hook_may_use_the_registry():
    """Hooks run outside the lock: one that removes itself (a request ending) cannot deadlock."""
    registry = CancelRegistry()

    def hook():
        registry.remove("r1", hook)

    registry.add("r1", hook)
    t = threading.Thread(target=registry.stop, args=("r1",))
    t.start()
    t.join(30)
    assert not t.is_alive() and len(registry) == 0
