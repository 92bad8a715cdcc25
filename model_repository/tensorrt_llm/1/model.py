"""tensorrt_llm (engine: torch): the token-level contract over llmserve's in-flight batching engine.

Decoupled: execute() only validates and enqueues; the engine thread sends each response."""

import json
import threading

import triton_python_backend_utils as pb_utils

from llmserve.engine.engine import EngineBusy
from llmserve.engine_service import EngineService, options_from_params
from llmserve.metrics import EngineMetrics
from llmserve.tokenizer import resolve_dir
from llmserve.triton_glue import error_response, parameters, reader, tensors


class TritonPythonModel:
    def initialize(self, args):
        params = parameters(args)
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        self.service = EngineService(options_from_params(params, lambda p: resolve_dir(p, args["model_repository"])))
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
        def send(outputs, final, error):
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            if error is not None:
                code = (pb_utils.TritonError.CANCELLED if error == "cancelled" else
                        pb_utils.TritonError.UNAVAILABLE if error.startswith("timeout") else pb_utils.TritonError.INTERNAL)
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(error, code)), flags=flags)
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

            def send(outputs, final, error, i=i, event=event):
                responses[i] = (error_response(pb_utils, RuntimeError(error)) if error else
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
