"""tensorrt_llm (engine: tensorrtllm): the token relay in front of the C++ backend model
(tensorrt_llm_cpp). Same token-level contract as the torch engine; logic: llmserve.pipeline.relay.

A thread per request: it iterates the backend's decoupled BLS responses and sends what the relay
stream returns."""

import json
import threading
import time
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from llmserve.errors import RequestError, is_request_error
from llmserve.pipeline.triton_glue import error_response, parameters, reader, tensors
from llmserve.request.token_request import parse_engine_request
from llmserve.text.tokenizer import load_fast, resolve_dir
from llmserve.pipeline.relay import NOT_FORWARDED, RelayOptions, RelayStream, backend_tokens

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
BACKEND_OUTPUTS = ["output_ids", "sequence_length", "cum_log_probs", "output_log_probs"]


class TritonPythonModel:
    def initialize(self, args):
        repo = args["model_repository"]
        self.opts = RelayOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo))
        self.target = self.opts.target_model
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        self.tok = load_fast(self.opts.tokenizer_dir)
        self.inner = {}  # Triton request id -> inner backend request ids (a client `stop` is forwarded)
        self.lock = threading.Lock()

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                threading.Thread(target=self._serve, args=(request, request.get_response_sender()), daemon=True).start()
            return None
        results = [None] * len(requests)
        threads = [threading.Thread(target=self._serve, args=(r, _Collect(results, i))) for i, r in enumerate(requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    # --- one request ---------------------------------------------------------------------------------
    def _serve(self, request, sender):
        read = reader(pb_utils, request)
        outer = request.request_id()
        stop = read("stop")
        if stop is not None and bool(stop.reshape(-1)[0]):
            return self._forward_stop(outer, sender)
        try:
            req = parse_engine_request(
                read, vocab_size=self.tok.get_vocab_size(), default_end_ids=(),
                max_input_len=self.opts.max_input_len, max_output_len=self.opts.max_output_len,
                exclude_default=self.opts.exclude_input_in_output,
                decode_word=lambda ids: self.tok.decode(ids, skip_special_tokens=False))
        except RequestError as e:
            return sender.send(error_response(pb_utils, e), flags=FINAL)
        if not self.decoupled:
            req.streaming = False  # one answer per request (serving.streaming: false)
        inner_id = f"{outer or 'relay'}:{uuid.uuid4().hex}"
        with self.lock:
            self.inner.setdefault(outer, set()).add(inner_id)
        try:
            self._relay(request, req, inner_id, sender)
        finally:
            with self.lock:
                ids = self.inner.get(outer, set())
                ids.discard(inner_id)
                if not ids:
                    self.inner.pop(outer, None)

    def _relay(self, request, req, inner_id, sender):
        inputs = [t for t in request.inputs() if t.name() not in NOT_FORWARDED]
        inputs.append(pb_utils.Tensor("streaming", np.array([[True]], dtype=np.bool_)))
        stream = RelayStream(req, self.tok, self.opts.skip_special_tokens)
        cancel_check = _CancelCheck()
        responses = pb_utils.InferenceRequest(
            model_name=self.target, inputs=inputs, requested_output_names=BACKEND_OUTPUTS,
            request_id=inner_id).exec(decoupled=True)
        for response in responses:
            if response.has_error():
                message = response.error().message()
                code = pb_utils.TritonError.INVALID_ARG if is_request_error(message) else pb_utils.TritonError.INTERNAL
                return sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code)), flags=FINAL)
            ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
            if ids is None:
                continue  # the backend's empty final response
            lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy()
            lp = pb_utils.get_output_tensor_by_name(response, "output_log_probs")
            tokens = backend_tokens(ids.as_numpy(), lengths)
            chunk = stream.push(tokens, None if lp is None else lp.as_numpy().reshape(-1)[: len(tokens)].tolist())
            if chunk is not None:
                sender.send(pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, chunk)))
            if stream.stopped or cancel_check.cancelled(sender):
                self._stop(inner_id)
                break  # the rest of the stream (if any) is dropped with the iterator
        chunk = stream.finish()
        if chunk is None:
            return sender.send(flags=FINAL)
        sender.send(pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, chunk)), flags=FINAL)

    def _stop(self, inner_id: str):
        """The backend's `stop` input: cancel the request with this id (answered by an empty final)."""
        zero = np.zeros((1, 1), dtype=np.int32)
        inputs = [pb_utils.Tensor("input_ids", zero), pb_utils.Tensor("input_lengths", zero + 1),
                  pb_utils.Tensor("request_output_len", zero + 1),
                  pb_utils.Tensor("stop", np.array([[True]], dtype=np.bool_))]
        for _ in pb_utils.InferenceRequest(model_name=self.target, inputs=inputs, request_id=inner_id,
                                           requested_output_names=["output_ids"]).exec(decoupled=True):
            pass

    def _forward_stop(self, outer, sender):
        if not outer:
            return sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "Trying to stop a request but request ID is not provided")), flags=FINAL)
        with self.lock:
            ids = list(self.inner.get(outer, ()))
        for inner_id in ids:
            self._stop(inner_id)
        sender.send(flags=FINAL)


class _CancelCheck:
    """The client went away (only seen when the relay is the top-level request: a direct gRPC client
    of tensorrt_llm; through the ensemble, postprocessing's stop arrives instead). is_cancelled() is an
    IPC round trip, so it is asked at most every PERIOD_S, like the C++ backend's
    cancellation_check_period_ms."""

    PERIOD_S = 0.1

    def __init__(self):
        self.last = time.monotonic()

    def cancelled(self, sender) -> bool:
        now = time.monotonic()
        if now - self.last < self.PERIOD_S or not hasattr(sender, "is_cancelled"):
            return False
        self.last = now
        return bool(sender.is_cancelled())


class _Collect:
    """A response sender for non-decoupled execution: keeps the final response of one request."""

    def __init__(self, results, index):
        self.results, self.index, self.last = results, index, None

    def send(self, response=None, flags=0):
        if response is not None:
            self.last = response
        if flags & FINAL:
            self.results[self.index] = self.last or pb_utils.InferenceResponse(output_tensors=[])
