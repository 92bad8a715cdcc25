"""StreamSender: what the tensorrt_llm adapter hands Triton's response sender (fake pb module)."""

from types import SimpleNamespace

import numpy as np

from llmserve.finish import FinishReason
from llmserve.pipeline.triton_glue import StreamSender


class FakePb:
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class TritonError:
        CANCELLED, UNAVAILABLE, INTERNAL, INVALID_ARG = "CANCELLED", "UNAVAILABLE", "INTERNAL", "INVALID_ARG"

        def __init__(self, message, code):
            self.message, self.code = message, code

    class Tensor:
        def __init__(self, name, value):
            self.name, self.value = name, value

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None):
            self.output_tensors, self.error = list(output_tensors), error


class FakeRequest:
    def __init__(self, wanted):
        self.sent = []
        self.wanted = wanted
        sender = SimpleNamespace(
            send=lambda response=None, flags=0: self.sent.append((response, flags)), is_cancelled=lambda: False
        )
        self.get_response_sender = lambda: sender

    def requested_output_names(self):
        return self.wanted

    def request_id(self):
        return "r-1"


OUTPUTS = {
    "output_ids": np.array([[[5, 6]]], dtype=np.int32),
    "sequence_length": np.array([[2]], dtype=np.int32),
    "cum_log_probs": np.array([[-1.0]], dtype=np.float32),
    "output_log_probs": np.array([[[-0.5, -0.5]]], dtype=np.float32),
    "output_context_ids": np.array([[[1]]], dtype=np.int32),
}


def test_only_requested_outputs_reach_the_sender():
    """An unrequested tensor handed to response_sender.send() segfaults a Python 3.12 stub in
    Triton 2.51 (tests/e2e/test_stub_python.py): none may get there."""
    request = FakeRequest({"output_ids", "sequence_length"})
    send = StreamSender(FakePb, request)
    send(OUTPUTS, False)
    send(OUTPUTS, True)
    (first, flags0), (last, flags1) = request.sent
    assert [t.name for t in first.output_tensors] == ["output_ids", "sequence_length"]
    assert (flags0, flags1) == (0, FakePb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_no_names_means_every_output_and_failures_carry_codes():
    request = FakeRequest(set())  # (Triton fills in every output; an empty set still sends them all)
    send = StreamSender(FakePb, request)
    send(OUTPUTS, False)
    send(None, True, FinishReason.CANCELLED, "cancelled")
    send(None, True)
    (ok, _), (cancelled, flags), (close, _) = request.sent
    assert len(ok.output_tensors) == 5
    assert (cancelled.error.code, flags) == ("CANCELLED", 1)
    assert close is None


def test_send_queue_keeps_order_and_reports_backlog_and_failures():
    import threading

    from llmserve.pipeline.triton_glue import SendQueue

    gate = threading.Event()
    request = FakeRequest({"output_ids"})
    real_send = request.get_response_sender().send

    def slow_send(response=None, flags=0):  # the IPC round trip, held until the test lets it go
        gate.wait(10)
        real_send(response, flags)

    request.get_response_sender().send = slow_send
    sends = SendQueue(threads=2)
    send = StreamSender(FakePb, request, sends)
    for i in range(5):
        send({"output_ids": np.array([[[i]]], dtype=np.int32)}, i == 4)
    assert send.backlogged()  # nothing went out yet: the caller returned at once
    gate.set()
    sends.close()
    assert not send.backlogged()
    assert [r.output_tensors[0].value.item() for r, _ in request.sent] == [0, 1, 2, 3, 4]
    assert [f for _, f in request.sent] == [0, 0, 0, 0, 1]

    broken = FakeRequest(set())
    broken.get_response_sender().send = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stream closed"))
    sends = SendQueue(threads=1)
    send = StreamSender(FakePb, broken, sends)
    send(OUTPUTS, False)
    sends.close()
    assert send.is_cancelled()  # the engine frees the request at its next poll


def test_a_bounded_send_queue_makes_the_caller_wait_for_room():
    """max_pending: the producer (the stand-in's engine thread) waits once that many responses are
    queued and unsent, and goes on as soon as one is sent; nothing is lost or reordered."""
    import threading

    from llmserve.pipeline.triton_glue import SendQueue

    gate = threading.Event()
    request = FakeRequest({"output_ids"})
    real_send = request.get_response_sender().send

    def slow_send(response=None, flags=0):
        gate.wait(30)
        real_send(response, flags)

    request.get_response_sender().send = slow_send
    sends = SendQueue(threads=1, max_pending=2)
    send = StreamSender(FakePb, request, sends)
    handed = []

    def produce():
        for i in range(4):
            send({"output_ids": np.array([[[i]]], dtype=np.int32)}, i == 3)
            handed.append(i)

    producer = threading.Thread(target=produce)
    producer.start()
    for _ in range(3000):  # the first two go in at once (however busy the machine is)
        if len(handed) >= 2:
            break
        producer.join(0.01)
    producer.join(0.3)
    assert handed == [0, 1]  # the third waits for room: two are queued and none sent
    gate.set()
    producer.join(30)
    sends.close()
    assert handed == [0, 1, 2, 3]
    assert [r.output_tensors[0].value.item() for r, _ in request.sent] == [0, 1, 2, 3]


def test_is_cancelled_is_never_asked_of_triton_after_the_final_response():
    """Triton frees a request's response factory once its final response is out; is_cancelled() (asked
    by the engine's poller thread) must not reach the sender after that."""
    request = FakeRequest({"output_ids"})
    asked = []
    request.get_response_sender().is_cancelled = lambda: asked.append(len(request.sent)) or False
    send = StreamSender(FakePb, request)
    send(OUTPUTS, False)
    assert send.is_cancelled() is False
    send(OUTPUTS, True)
    assert send.is_cancelled() is False
    refused = StreamSender(FakePb, request)
    refused.fail(ValueError("bad input"))
    assert refused.is_cancelled() is False
    assert asked == [1]  # once, between the first response and the final one
