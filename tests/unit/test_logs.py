"""llmserve/logs.py and what uses it: formats, the request id, the bridge to Triton's logger, the
rate limit; the engine logs a failed step with its traceback (once per interval per error), a failing
callback with its request id and a DEBUG line per finished request; the frontend writes one access
line per request with its request id, which it returns and passes on to Triton."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time

import pytest
import requests
import torch

from llmserve import logs
from llmserve.deploy.tritonserver import free_ports
from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.finish import FinishReason
from llmserve.openai_api.errors import APIError
from llmserve.spec import ROOT, load_spec
from llmserve.text.tokenizer import load_fast

from .engine.helpers import make_engine
from .openai_api.fake import FakeEnsemble, Frontend


@pytest.fixture
def own_root():
    """configure() changes the root logger: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _boom():
    raise RuntimeError("boom")


def test_json_lines_carry_request_id_traceback_and_extra_fields(own_root):
    out = io.StringIO()
    logs.configure("debug", json=True, stream=out)
    log = logging.getLogger("llmserve.test")
    with logs.request_context("req-1"):
        log.info("hello %s", "world", extra={"status": 200})
        try:
            _boom()
        except RuntimeError:
            log.exception("failed")
    log.warning("outside", extra={"request_id": "given"})
    log.debug("no id")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["message"] for d in lines] == ["hello world", "failed", "outside", "no id"]
    first, failed, outside, plain = lines
    assert set(first) >= {"time", "level", "logger", "message", "request_id", "exc_info"}
    assert first["level"] == "INFO" and first["logger"] == "llmserve.test" and first["time"].endswith("Z")
    assert first["request_id"] == "req-1" and first["status"] == 200 and first["exc_info"] is None
    assert failed["request_id"] == "req-1" and "RuntimeError: boom" in failed["exc_info"]
    assert "_boom" in failed["exc_info"]
    assert outside["request_id"] == "given" and plain["request_id"] is None


def test_text_format_and_reconfigure(own_root):
    first, out = io.StringIO(), io.StringIO()
    logs.configure("info", stream=first)
    logs.configure("warning", stream=out)  # replaces its own handler, does not add a second one
    log = logging.getLogger("llmserve.test")
    log.info("hidden")
    with logs.request_context("abc"):
        log.warning("shown")
    assert first.getvalue() == ""
    line = out.getvalue().strip()
    assert line.endswith("WARNING llmserve.test [abc] shown") and line[:4].isdigit()
    with pytest.raises(ValueError):
        logs.configure("loud")


def test_request_context_follows_asyncio_tasks():
    seen = {}

    async def child(name):
        await asyncio.sleep(0)
        seen[name] = logs.current_request_id()

    async def request(rid):
        with logs.request_context(rid):
            await asyncio.gather(child(rid + "-a"), asyncio.create_task(child(rid + "-b")))

    async def both():
        await asyncio.gather(request("r1"), request("r2"))

    asyncio.run(both())
    assert seen == {"r1-a": "r1", "r1-b": "r1", "r2-a": "r2", "r2-b": "r2"}
    assert logs.current_request_id() is None


def test_cli_options_fall_back_on_the_spec(own_root):
    import argparse

    ap = argparse.ArgumentParser()
    logs.add_cli_options(ap)
    spec = load_spec(ROOT / "specs" / "tiny.yaml")
    assert spec.logging.format == "text" and spec.logging.level == "info"
    h = logs.configure_from_args(ap.parse_args([]), spec)
    assert isinstance(h.formatter, logs.TextFormatter) and logging.getLogger().level == logging.INFO
    h = logs.configure_from_args(ap.parse_args(["--log-format", "json", "--log-level", "debug"]), spec)
    assert isinstance(h.formatter, logs.JsonFormatter) and logging.getLogger().level == logging.DEBUG


class FakeTritonLogger:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def log_info(self, m):
        self.lines.append(("info", m))

    def log_warn(self, m):
        self.lines.append(("warn", m))

    def log_error(self, m):
        self.lines.append(("error", m))

    def log_verbose(self, m):
        self.lines.append(("verbose", m))


class FakePb:
    Logger = FakeTritonLogger()


@pytest.fixture
def triton_logs():
    logger = logging.getLogger(logs.ROOT_LOGGER)
    saved = list(logger.handlers), logger.level, logger.propagate
    pb = FakePb()
    pb.Logger = FakeTritonLogger()
    logs.to_triton(pb)
    logs.to_triton(pb)  # idempotent: one handler
    yield pb.Logger
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]


def test_triton_handler_maps_levels_and_carries_the_request_id(triton_logs):
    assert sum(isinstance(h, logs.TritonHandler) for h in logging.getLogger("llmserve").handlers) == 1
    log = logging.getLogger("llmserve.engine.engine")
    log.debug("d", extra={"request_id": "r-7"})
    with logs.request_context("r-8"):
        log.info("i")
    log.warning("w")
    try:
        _boom()
    except RuntimeError as e:
        log.error("e", exc_info=e)
    levels = [level for level, _ in triton_logs.lines]
    assert levels == ["verbose", "info", "warn", "error"]
    assert triton_logs.lines[0][1] == "[llmserve.engine.engine] [r-7] d"
    assert triton_logs.lines[1][1] == "[llmserve.engine.engine] [r-8] i"
    assert "Traceback" in triton_logs.lines[3][1] and "RuntimeError: boom" in triton_logs.lines[3][1]
    logging.getLogger("other").error("not ours")  # only the llmserve logger goes to Triton
    assert len(triton_logs.lines) == 4


def test_throttle_counts_what_it_leaves_out():
    now = [0.0]
    t = logs.Throttle(10, clock=lambda: now[0])
    assert t.allow("a") == 0
    assert t.allow("a") is None and t.allow("a") is None
    assert t.allow("b") == 0  # another error has its own budget
    now[0] = 10.5
    assert t.allow("a") == 2
    assert t.allow("a") is None


def test_throttle_keys_by_type_and_place_not_message(caplog):
    t = logs.Throttle(60)
    log = logging.getLogger("llmserve.test")
    logged = []
    for i in range(3):
        try:
            raise ValueError(f"bad value {i}")  # one place, three messages: one error
        except ValueError as e:
            logged.append(t.exception(log, e, "failed"))
    assert logged == [True, False, False]
    try:
        _boom()
    except RuntimeError as e:
        assert t.exception(log, e, "failed")


# --- the engine -------------------------------------------------------------------------------------
@pytest.fixture
def engine_parts(tiny_llama):
    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    return model, load_fast(tiny_llama)


def _seq(done: dict, key: str, on_output=None) -> Sequence:
    def record(seq, tokens, lp, finished, reason):
        if finished:
            done[key] = reason

    return Sequence(
        prompt=[1, 2, 3], params=SamplingParams(max_new_tokens=3, min_tokens=3), on_output=on_output or record, key=key
    )


def _wait(pred, timeout_s=60):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout_s, "timed out"
        time.sleep(0.01)


def test_a_failed_engine_step_is_logged_with_its_traceback_once_per_interval(engine_parts, caplog):
    caplog.set_level(logging.DEBUG, logger="llmserve")
    model, tok = engine_parts
    engine = make_engine(model, tok)
    real, fails = model.forward, {"n": 2}

    def flaky(*a, **k):
        if fails["n"]:
            fails["n"] -= 1
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(*a, **k)

    model.forward = flaky
    engine.start()
    try:
        done = {}
        for key in ("req-a", "req-b", "req-c"):  # two failed steps, then one that works
            engine.submit(_seq(done, key))
            _wait(lambda: key in done)
    finally:
        engine.shutdown()
    assert done == {"req-a": FinishReason.ERROR, "req-b": FinishReason.ERROR, "req-c": FinishReason.LENGTH}
    failed = [r for r in caplog.records if r.getMessage().startswith("engine step failed")]
    assert len(failed) == 1, [r.getMessage() for r in failed]  # the second, same error: counted, not shown
    rec = failed[0]
    assert rec.levelno == logging.ERROR and rec.name == "llmserve.engine.engine" and "req-a" in rec.getMessage()
    text = caplog.text
    assert "Traceback" in text and "illegal memory access" in text and "in flaky" in text
    assert engine.throttle.allow(logs.error_key(rec.exc_info[1])) is None  # still within the interval
    finished = [r for r in caplog.records if r.getMessage().startswith("finished:")]
    assert [(r.levelno, r.request_id) for r in finished if r.request_id == "req-c"] == [(logging.DEBUG, "req-c")]
    assert "length, 3 prompt + 3 generated tokens" in finished[-1].getMessage()


def test_a_failing_callback_is_logged_with_its_request_id(engine_parts, caplog):
    caplog.set_level(logging.WARNING, logger="llmserve")
    model, tok = engine_parts
    engine = make_engine(model, tok)
    done = {}

    def broken(seq, tokens, lp, finished, reason):
        if finished:
            done["broken"] = reason
            return
        raise ConnectionError("the client is gone")

    s = _seq(done, "req-gone", on_output=broken)
    s.streaming = True
    engine.submit(s)
    for _ in range(10):
        if "broken" in done:
            break
        engine.step()
    assert done["broken"] == FinishReason.CANCELLED
    rec = [r for r in caplog.records if "sending a response failed" in r.getMessage()]
    assert len(rec) == 1 and rec[0].request_id == "req-gone" and rec[0].exc_info[0] is ConnectionError


# --- the frontend -----------------------------------------------------------------------------------
TOKENIZER = str(load_spec(ROOT / "specs" / "default.yaml").checkpoint_path())


@pytest.fixture(scope="module")
def fe():
    with Frontend(TOKENIZER, free_ports(1)[0], FakeEnsemble()) as f:
        yield f


def _access(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "llmserve.openai_api.access" and hasattr(r, "status")]


def _wait_access(caplog, n):
    _wait(lambda: len(_access(caplog)) >= n, 30)  # written when the response is over, in the server's thread
    return _access(caplog)


def test_access_line_with_the_clients_request_id(fe, caplog):
    caplog.set_level(logging.INFO, logger="llmserve")
    fe.fake.error = None
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    r = requests.post(fe.url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "trace-42"}, timeout=30)
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-42"
    assert fe.fake.request_ids[-1] == "trace-42"  # what Triton gets (EnsembleClient appends -<attempt>)
    (line,) = _wait_access(caplog, 1)
    assert line.levelno == logging.INFO and line.request_id == "trace-42"
    assert (line.method, line.path, line.status, line.completion_tokens) == ("POST", "/v1/chat/completions", 200, 4)
    assert line.getMessage().startswith("POST /v1/chat/completions 200 ") and "completion_tokens=4" in line.getMessage()


def test_minted_request_id_stream_and_error_cause(fe, caplog):
    caplog.set_level(logging.INFO, logger="llmserve")
    fe.fake.error = None
    body = {"model": "test-model", "prompt": "x", "max_tokens": 8, "stream": True}
    r = requests.post(fe.url + "/v1/completions", json=body, headers={"X-Request-Id": "bad id\x7f"}, timeout=30)
    rid = r.headers["x-request-id"]
    assert r.status_code == 200 and rid.startswith("req-") and fe.fake.request_ids[-1] == rid
    assert r.text.rstrip().endswith("data: [DONE]")
    fe.fake.error = APIError(503, "every Triton server is busy; retry later", retry_after_s=1)
    r = requests.post(fe.url + "/v1/completions", json={**body, "stream": False}, timeout=30)
    assert r.status_code == 503 and r.headers["x-request-id"].startswith("req-")
    r = requests.post(fe.url + "/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=30)
    assert r.status_code == 404
    fe.fake.error = None
    streamed, busy, unknown = _wait_access(caplog, 3)
    assert streamed.request_id == rid and streamed.status == 200 and streamed.completion_tokens == 4
    # Where the first token's time went: the frontend's part is first_byte_ms - triton_first_ms.
    assert streamed.first_byte_ms >= streamed.triton_first_ms >= 0
    assert f"first_byte_ms={streamed.first_byte_ms}" in streamed.getMessage()
    assert not hasattr(busy, "first_byte_ms")  # no token, no time to it
    assert busy.levelno == logging.WARNING and busy.status == 503 and "busy" in busy.error
    assert unknown.levelno == logging.INFO and unknown.status == 404 and "does not exist" in unknown.error
    assert len({streamed.request_id, busy.request_id, unknown.request_id}) == 3


def test_health_is_quiet_and_a_request_id_in_use_is_made_unique(fe, caplog):
    caplog.set_level(logging.INFO, logger="llmserve")
    assert requests.get(fe.url + "/health", timeout=30).status_code == 200
    fe.fake.error, fe.fake.delay_s, fe.fake.pieces = None, 0.3, [("x", 1)] * 3
    try:
        body = {"model": "test-model", "prompt": "x", "max_tokens": 3, "stream": True}
        first = requests.post(
            fe.url + "/v1/completions", json=body, headers={"X-Request-Id": "dup"}, stream=True, timeout=30
        )
        second = requests.post(fe.url + "/v1/completions", json=body, headers={"X-Request-Id": "dup"}, timeout=30)
        first.close()
    finally:
        fe.fake.delay_s = 0.0
    assert first.headers["x-request-id"] == "dup"
    assert second.headers["x-request-id"].startswith("dup.") and fe.fake.request_ids[-1].startswith("dup.")
    lines = _wait_access(caplog, 2)
    assert all(r.path != "/health" for r in lines)


def test_an_unexpected_error_is_logged_with_its_traceback_and_answered_500(fe, caplog):
    caplog.set_level(logging.INFO, logger="llmserve")
    fe.fake.error = KeyError("surprise")
    try:
        r = requests.post(
            fe.url + "/v1/completions",
            json={"model": "test-model", "prompt": "x", "max_tokens": 2},
            headers={"X-Request-Id": "oops-1"},
            timeout=30,
        )
    finally:
        fe.fake.error = None
    assert r.status_code == 500 and r.headers["x-request-id"] == "oops-1"
    assert r.json()["error"]["message"] == "internal error: KeyError"
    (line,) = _wait_access(caplog, 1)
    assert line.levelno == logging.WARNING and line.status == 500 and "surprise" in line.error
    crash = [r for r in caplog.records if r.getMessage().startswith("unhandled error in POST /v1/completions")]
    assert len(crash) == 1 and crash[0].exc_info[0] is KeyError


def test_a_failing_send_is_logged_with_its_request_id(caplog):
    from types import SimpleNamespace

    from llmserve.pipeline.triton_glue import SendQueue, StreamSender

    caplog.set_level(logging.WARNING, logger="llmserve")

    def refuse(response=None, flags=0):
        raise RuntimeError("Unable to send response")

    sender = SimpleNamespace(send=refuse, is_cancelled=lambda: False)
    request = SimpleNamespace(
        get_response_sender=lambda: sender, requested_output_names=lambda: [], request_id=lambda: "req-send-1"
    )
    pb = SimpleNamespace(TRITONSERVER_RESPONSE_COMPLETE_FINAL=1)
    sends = SendQueue(threads=1)
    send = StreamSender(pb, request, sends)
    send(None, True)
    sends.close()
    assert send.is_cancelled()  # the engine drops the request at its next poll
    rec = [r for r in caplog.records if "sending a response failed" in r.getMessage()]
    assert len(rec) == 1 and rec[0].request_id == "req-send-1" and rec[0].exc_info[0] is RuntimeError


def test_the_relay_logs_one_verbose_line_per_request_with_its_id(caplog):
    from .pipeline.fake_pb import FakePb
    from .pipeline.test_relay import GENERATED, Backend, generation, relay_for

    caplog.set_level(logging.DEBUG, logger="llmserve.pipeline.relay")
    ids = logs.RequestIdFilter()  # what every handler of ours has: the request's context when it logs
    caplog.handler.addFilter(ids)
    try:
        request = generation(request_id="req-relay-1-1")
        relay_for(FakePb({"backend": Backend()})).serve(request, request.sender)
    finally:
        caplog.handler.removeFilter(ids)
    (line,) = [r for r in caplog.records if r.getMessage().startswith("finished:")]
    assert line.levelno == logging.DEBUG and line.getMessage().startswith(f"finished: 3 prompt + {len(GENERATED)}")
    assert line.request_id == "req-relay-1-1"


def test_inflight_ids_are_unique_across_workers(tmp_path):
    """Two worker processes (openai_api/workers.py) share the folder: an id one of them holds is taken."""
    from llmserve.openai_api.access import InflightIds

    a, b = InflightIds(str(tmp_path)), InflightIds(str(tmp_path))
    assert a.claim("dup") and not b.claim("dup") and not a.claim("dup")
    assert b.claim("dup.1a2b3c") and b.claim("a/b:c")  # any valid id, '/' included
    a.release("dup")
    assert b.claim("dup") and not a.claim("dup")
    for rid in ("dup", "dup.1a2b3c", "a/b:c"):
        b.release(rid)
    assert not list(tmp_path.iterdir())
    one = InflightIds()  # a single process: a set
    assert one.claim("x") and not one.claim("x")
    one.release("x")
    assert one.claim("x")
