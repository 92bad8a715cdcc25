"""Engine failure paths (issue 11): a failing step loses no request, persistent failures make the
engine unhealthy (it refuses work and says why), a `stop` by request id cancels, shutdown answers
everything still in the engine, max_queue_size 0 means unbounded."""

import threading
import time

import pytest
import torch

from llmserve.engine import engine as engine_mod
from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.errors import EngineBusy, EngineUnavailable
from llmserve.finish import FinishReason
from llmserve.text.tokenizer import load_fast

from .helpers import make_engine


@pytest.fixture
def engine_parts(tiny_llama):
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    return model, load_fast(tiny_llama)


def _seq(done: dict, name: str, n: int = 4, key: str = "") -> Sequence:
    def on_output(seq, tokens, lp, finished, reason):
        if finished:
            done[name] = (reason, seq.error)

    return Sequence(
        prompt=[1, 2, 3], params=SamplingParams(max_new_tokens=n, min_tokens=n), on_output=on_output, key=key
    )


def _wait(pred, timeout_s=30):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout_s, "timed out"
        time.sleep(0.01)


def test_failing_steps_answer_every_request_then_the_engine_is_unhealthy(engine_parts):
    model, tok = engine_parts
    engine = make_engine(model, tok)
    calls = {"n": 0}

    def broken_forward(*a, **k):
        calls["n"] += 1
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    model.forward = broken_forward
    engine.start()
    done = {}
    for i in range(engine_mod.MAX_CONSECUTIVE_FAILURES):
        engine.submit(_seq(done, f"r{i}"))
        _wait(lambda: f"r{i}" in done)
    _wait(lambda: engine.health() is not None)
    print(f"\n{calls['n']} failing steps; health: {engine.health()}")
    assert all(r == FinishReason.ERROR for r, _ in done.values())
    assert "illegal memory access" in done["r0"][1]
    assert engine.stats.step_failures == engine_mod.MAX_CONSECUTIVE_FAILURES
    assert "in a row" in engine.health()
    with pytest.raises(EngineUnavailable):
        engine.submit(_seq(done, "late"))


def test_one_failing_step_is_not_fatal(engine_parts):
    model, tok = engine_parts
    engine = make_engine(model, tok)
    real, fail = model.forward, {"once": True}

    def flaky(*a, **k):
        if fail.pop("once", False):
            raise RuntimeError("transient")
        return real(*a, **k)

    model.forward = flaky
    engine.start()
    done = {}
    engine.submit(_seq(done, "a"))
    _wait(lambda: "a" in done)
    engine.submit(_seq(done, "b"))
    _wait(lambda: "b" in done)
    engine.shutdown()
    assert done["a"][0] == FinishReason.ERROR and done["b"][0] == FinishReason.LENGTH
    assert engine.health() is None and engine.stats.step_failures == 1


def test_no_request_is_lost_when_a_step_fails_while_others_submit(engine_parts):
    """Finding 1: requests submitted while the loop fails the queue are answered, every one."""
    model, tok = engine_parts
    engine = make_engine(model, tok, max_waiting=0)
    real, n = model.forward, {"i": 0}

    def sometimes(*a, **k):
        n["i"] += 1
        if n["i"] % 5 == 0:
            time.sleep(0.001)
            raise RuntimeError("every fifth step fails")
        return real(*a, **k)

    model.forward = sometimes
    engine_mod.MAX_CONSECUTIVE_FAILURES, saved = 10**9, engine_mod.MAX_CONSECUTIVE_FAILURES
    try:
        engine.start()
        done = {}

        def client(c):
            for j in range(15):
                engine.submit(_seq(done, f"{c}-{j}", n=2))
                time.sleep(0.002)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _wait(lambda: len(done) == 60)
        engine.shutdown()
    finally:
        engine_mod.MAX_CONSECUTIVE_FAILURES = saved
    reasons = [r for r, _ in done.values()]
    print(
        f"\n60 requests under failing steps: {reasons.count(FinishReason.LENGTH)} served, "
        f"{reasons.count(FinishReason.ERROR)} failed with their step, 0 lost"
    )
    assert len(done) == 60


def test_stop_by_request_id_cancels_and_counts(engine_parts):
    model, tok = engine_parts
    engine = make_engine(model, tok)
    done = {}
    engine.submit(_seq(done, "victim", n=50, key="req-7"))
    engine.submit(_seq(done, "other", n=50, key="req-8"))
    engine.step()
    assert not engine.cancel("nobody")
    assert engine.cancel("req-7")
    engine.step()
    assert done["victim"][0] == FinishReason.CANCELLED and "other" not in done
    assert engine.stats.cancelled == 1 and engine.stats.timed_out == 0


def test_is_cancelled_is_polled_at_most_every_period(engine_parts):
    model, tok = engine_parts
    engine = make_engine(model, tok)
    asked = {"n": 0}
    seq = _seq({}, "x", n=40)

    def is_cancelled():
        asked["n"] += 1
        return False

    seq.is_cancelled = is_cancelled
    engine.submit(seq)
    t0 = time.monotonic()
    steps = 0
    while engine.running or engine.waiting:
        engine.step()
        steps += 1
    elapsed = time.monotonic() - t0
    print(f"\n{steps} steps in {elapsed * 1000:.0f} ms: is_cancelled asked {asked['n']} times")
    assert asked["n"] <= elapsed / engine.cancel_poll_s + 2


def test_a_started_engine_asks_is_cancelled_on_its_poller_thread_only(engine_parts):
    """The C++ backend polls cancellation on a thread of its own (WaitForCancel); so does a started
    engine: is_cancelled() (an IPC round trip in the Python backend) never runs on the engine thread,
    and a request whose client went away is still freed, as CANCELLED, while its neighbour finishes."""
    model, tok = engine_parts
    engine = make_engine(model, tok, cancel_poll_s=0.01)
    asked_on: set[str] = set()
    asked = threading.Event()
    done = {}
    leaving, staying = _seq(done, "leaving", n=60), _seq(done, "staying", n=8)
    inner = leaving.on_output

    def on_output(seq, tokens, lp, finished, reason):
        inner(seq, tokens, lp, finished, reason)
        asked.wait(30)  # the engine goes on only once the poller has seen the client gone

    def gone():
        asked_on.add(threading.current_thread().name)
        asked.set()
        return True

    def here():
        asked_on.add(threading.current_thread().name)
        return False

    leaving.on_output, leaving.is_cancelled, staying.is_cancelled = on_output, gone, here
    engine.start()
    try:
        engine.submit(leaving)
        engine.submit(staying)
        _wait(lambda: "staying" in done and "leaving" in done)
    finally:
        engine.shutdown()
    assert done["staying"][0] is FinishReason.LENGTH
    assert done["leaving"][0] is FinishReason.CANCELLED
    assert asked_on == {"llmserve-cancel-poll"}
    assert not engine._poller.is_alive()  # shutdown stops the poller too


def test_shutdown_answers_everything(engine_parts):
    model, tok = engine_parts
    engine = make_engine(model, tok)
    done = {}
    engine.submit(_seq(done, "a", n=40))
    engine.submit(_seq(done, "b", n=40))
    engine.submit(_seq(done, "c", n=40))  # waits: 2 slots
    engine.step()
    engine.shutdown()  # never started: the loop is not running
    assert set(done) == {"a", "b", "c"} and all(r == FinishReason.ERROR for r, _ in done.values())
    with pytest.raises(EngineUnavailable):
        engine.submit(_seq(done, "d"))


def test_max_queue_size_zero_means_unbounded_and_a_bound_refuses(engine_parts):
    model, tok = engine_parts
    unbounded = make_engine(model, tok, max_waiting=0)
    for i in range(50):
        unbounded.submit(_seq({}, str(i)))
    bounded = make_engine(model, tok, max_waiting=2)
    bounded.submit(_seq({}, "1"))
    bounded.submit(_seq({}, "2"))
    with pytest.raises(EngineBusy, match="server busy"):
        bounded.submit(_seq({}, "3"))


def test_a_stalled_step_makes_the_engine_unhealthy(engine_parts):
    model, tok = engine_parts
    engine = make_engine(model, tok, stall_s=0.2)
    gate = threading.Event()
    real = model.forward

    def hang(*a, **k):
        gate.wait(10)
        return real(*a, **k)

    model.forward = hang
    engine.start()
    engine.submit(_seq({}, "x"))
    _wait(lambda: engine.health() is not None, 5)
    assert "more than 0.2 s" in engine.health()
    gate.set()
    engine.shutdown()
