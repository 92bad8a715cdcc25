"""tensorrt_llm (engine: torch): the token-level contract over llmserve's in-flight batching engine.

Decoupled: execute() only validates and enqueues (an engine in a process of its own is not waited for
either: a refusal it sends later gets the same error response, `refuse`); the engine thread hands each response to the
send threads (pipeline/triton_glue.SendQueue), so no step waits for an IPC round trip. Every
request is handled on its own: one that fails (a bad input, a full queue, anything unexpected)
gets its own error and never fails its batch neighbours. A request with `stop` true cancels the
requests that carry its request id (upstream's cancel-by-id; postprocessing sends it when the
ensemble request was cancelled, pipeline/cancellation.py). The engine's health drives the server's: see
llmserve/pipeline/health.py."""

import json
import threading

import triton_python_backend_utils as pb_utils

from llmserve.contract import REQUEST_KEY
from llmserve.errors import RequestError
from llmserve.logs import to_triton
from llmserve.pipeline.cancellation import key_tensor, request_key
from llmserve.pipeline.engine_service import EngineService
from llmserve.pipeline.health import StubWatchdog
from llmserve.pipeline.metrics import EngineMetrics
from llmserve.pipeline.options import EngineOptions
from llmserve.pipeline.triton_glue import (
    SendQueue,
    StreamSender,
    error_response,
    failure_code,
    parameters,
    reader,
    tensors,
)
from llmserve.request.token_request import is_stop_request
from llmserve.text.tokenizer import resolve_dir


class TritonPythonModel:
    def initialize(self, args):
        to_triton(pb_utils)  # llmserve's log records go to tritonserver's log (llmserve/logs.py)
        repo = args["model_repository"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        opts = EngineOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo))
        self.service = EngineService(opts)
        self.metrics = EngineMetrics(pb_utils, self.service.engine, labels={"model": args["model_name"]})
        self.sends = SendQueue(opts.send_threads)
        self.watchdog = StubWatchdog(args.get("model_instance_name", args["model_name"])).start(
            self.service.engine.health
        )

    def _stop(self, request) -> None:
        key = request.request_id()
        if not key:
            raise RequestError("stop", "a stop request must carry the request id of the request to cancel")
        self.service.stop(key)

    def execute(self, requests):
        if not self.decoupled:
            return self._execute_unary(requests)
        for request in requests:
            send = StreamSender(pb_utils, request, self.sends)  # only the requested outputs (triton_glue.tensors)
            try:
                read = reader(request)
                if is_stop_request(read):
                    self._stop(request)
                    send(None, True)  # upstream answers a stop with one empty final response
                    continue
                req = self.service.parse(read)
                key = request_key(read, request.request_id())  # the ensemble's key, else the request id
                echo = {REQUEST_KEY: key_tensor(key)} if read(REQUEST_KEY) is not None else None
                self.service.submit(
                    req, send, send.is_cancelled, key=key, backlogged=send.backlogged, echo=echo, refuse=send.fail
                )
            except Exception as e:  # this request only; its neighbours in the batch go on
                send.fail(e)
        return None

    def _execute_unary(self, requests):
        """Non-decoupled deployments (serving.streaming: false): wait for every request of the batch;
        the engine still batches them together."""
        responses, done = [None] * len(requests), []
        for i, request in enumerate(requests):
            event = threading.Event()

            def send(outputs, final, failure=None, message=None, i=i, event=event):
                responses[i] = (
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(message, failure_code(pb_utils, failure)))
                    if failure
                    else pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, outputs or {}))
                )
                event.set()

            try:
                read = reader(request)
                if is_stop_request(read):
                    self._stop(request)
                    responses[i] = pb_utils.InferenceResponse(output_tensors=[])
                    continue
                req = self.service.parse(read)
                req.streaming = False

                def refuse(e, i=i, event=event):  # refused by the engine process after submit returned
                    responses[i] = error_response(pb_utils, e)
                    event.set()

                self.service.submit(
                    req, send, lambda: False, key=request_key(read, request.request_id()), refuse=refuse
                )
                done.append(event)
            except Exception as e:  # this request only
                responses[i] = error_response(pb_utils, e)
        for event in done:
            event.wait()
        return responses

    def finalize(self):
        self.watchdog.close()  # a clean shutdown, not a death
        self.metrics.close()
        self.service.shutdown()
        self.sends.close()
