"""Cancellation through the ensemble on Triton 2.51, postprocessing's side.

Triton flags a cancelled ensemble request only on the steps it schedules after the cancel
(core's ensemble scheduler; server#6739): the running tensorrt_llm step never sees it, but the next
postprocessing step does (`request.is_cancelled()`), since each streamed tensorrt_llm response
spawns one. So postprocessing relays it: a BLS request with `stop` true and the same request id
(ensemble steps inherit the client's id) makes tensorrt_llm cancel that generation (upstream's
cancel-by-id, which the TensorRT-LLM backend implements too), and the step answers CANCELLED.

Conditions: the client sets a request id (HTTP generate "id", gRPC request_id), the request streams
(a non-streaming request has no postprocessing step until it is done), and postprocessing runs
without dynamic batching (with it, Triton's scheduler rejects the flagged request before execute;
the generator renders postprocessing that way when it has one instance). is_cancelled() is an IPC
round trip, so each request id is asked at most every `period_s`. `pb` is
triton_python_backend_utils (passed in)."""

from __future__ import annotations

import sys
import time

import numpy as np

from ..contract import ENGINE

PERIOD_S = 0.1
MAX_TRACKED = 4096  # request ids remembered for the throttle; older ones are forgotten first


class CancelRelay:
    def __init__(self, pb, engine_model: str = ENGINE, period_s: float = PERIOD_S):
        self.pb, self.engine_model, self.period_s = pb, engine_model, period_s
        self.last_asked: dict[str, float] = {}
        self.stopped: dict[str, float] = {}

    def cancelled(self, request) -> bool:
        """True if this step's ensemble request was cancelled (and the stop has been sent)."""
        key = request.request_id()
        if not key:
            return False
        now = time.monotonic()
        if key in self.stopped:
            return True
        last = self.last_asked.get(key)
        if last is not None and now - last < self.period_s:
            return False
        self.last_asked[key] = now
        if len(self.last_asked) > MAX_TRACKED:
            for k in list(self.last_asked)[: MAX_TRACKED // 2]:
                del self.last_asked[k]
        if not request.is_cancelled():
            return False
        self.stopped[key] = now
        if len(self.stopped) > MAX_TRACKED:
            for k in list(self.stopped)[: MAX_TRACKED // 2]:
                del self.stopped[k]
        self.send_stop(key)
        return True

    def send_stop(self, key: str) -> None:
        pb = self.pb
        inputs = [pb.Tensor("input_ids", np.zeros((1, 1), np.int32)),
                  pb.Tensor("input_lengths", np.ones((1, 1), np.int32)),
                  pb.Tensor("request_output_len", np.ones((1, 1), np.int32)),
                  pb.Tensor("stop", np.ones((1, 1), np.bool_))]
        try:
            bls = pb.InferenceRequest(model_name=self.engine_model, inputs=inputs, request_id=key,
                                      requested_output_names=["output_ids"])
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    print(f"[llmserve postprocessing] stop {key!r}: {response.error().message()}",
                          file=sys.stderr, flush=True)
        except Exception as e:  # never fail the step over it: the generation then ends by itself
            print(f"[llmserve postprocessing] stop {key!r} failed: {e}", file=sys.stderr, flush=True)

    def cancelled_response(self):
        pb = self.pb
        return pb.InferenceResponse(error=pb.TritonError("cancelled", pb.TritonError.CANCELLED))
