"""tensorrt_llm (engine: torch): the token-level contract over llmserve's in-flight batching engine.

Decoupled: execute() only validates and enqueues; the engine thread sends each response."""

import json
import threading

import triton_python_backend_utils as pb_utils

from llmserve.errors import EngineBusy
from llmserve.finish import FinishReason
from llmserve.pipeline.engine_service import EngineService
from llmserve.pipeline.metrics import EngineMetrics
from llmserve.pipeline.options import EngineOptions
from llmserve.pipeline.triton_glue import error_response, parameters, reader, tensors
from llmserve.text.tokenizer import resolve_dir


def error_code(failure: FinishReason):
    """How a request the engine could not finish is answered. (A function: pb_utils.TritonError
    does not exist yet while Triton imports this file to auto-complete the config.)"""
    return {FinishReason.CANCELLED: pb_utils.TritonError.CANCELLED,
            FinishReason.TIMEOUT: pb_utils.TritonError.UNAVAILABLE}.get(failure, pb_utils.TritonError.INTERNAL)


class TritonPythonModel:
    def initialize(self, args):
        repo = args["model_repository"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        self.service = EngineService(EngineOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo)))
        self.metrics = EngineMetrics(pb_utils, self.service.engine, labels={"model": args["model_name"]})

    def execute(self, requests):
        if not self.decoupled:
            return self._execute_unary(requests)
        for request in requests:
            sender = request.get_response_sender()
            try:
                req = self.service.parse(reader(pb_utils, request))
                self.service.submit(req, self._sender(sender), sender.is_cancelled)
            except (ValueError, EngineBusy) as e:
                sender.send(error_response(pb_utils, e), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def _sender(self, sender):
        def send(outputs, final, failure, message):
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            if failure is not None:
                code = error_code(failure)
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code)), flags=flags)
            elif outputs is None:
                sender.send(flags=flags)
            else:
                sender.send(pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, outputs)), flags=flags)

        return send

    def _execute_unary(self, requests):
        """Non-decoupled deployments (serving.streaming: false): wait for every request of the batch;
        the engine still batches them together."""
        responses, done = [None] * len(requests), []
        for i, request in enumerate(requests):
            try:
                req = self.service.parse(reader(pb_utils, request))
                req.streaming = False
            except ValueError as e:
                responses[i] = error_response(pb_utils, e)
                continue
            event = threading.Event()

            def send(outputs, final, failure, message, i=i, event=event):
                responses[i] = (error_response(pb_utils, RuntimeError(message)) if failure else
                                pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, outputs or {})))
                event.set()

            try:
                self.service.submit(req, send, lambda: False)
                done.append(event)
            except EngineBusy as e:
                responses[i] = error_response(pb_utils, e)
        for event in done:
            event.wait()
        return responses

    def finalize(self):
        self.metrics.close()
        self.service.shutdown()
