"""tensorrt_llm (engine: torch): the token-level contract over llmserve's in-flight batching engine.

Decoupled: execute() only validates and enqueues; the engine thread sends each response."""

import json
import threading

import triton_python_backend_utils as pb_utils

from llmserve.errors import EngineBusy
from llmserve.pipeline.engine_service import EngineService
from llmserve.pipeline.metrics import EngineMetrics
from llmserve.pipeline.options import EngineOptions
from llmserve.pipeline.triton_glue import StreamSender, error_response, parameters, reader, tensors
from llmserve.text.tokenizer import resolve_dir


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
            send = StreamSender(pb_utils, request)  # sends only the requested outputs (see triton_glue.tensors)
            try:
                req = self.service.parse(reader(pb_utils, request))
                self.service.submit(req, send, send.is_cancelled)
            except (ValueError, EngineBusy) as e:
                send.fail(e)
        return None

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
