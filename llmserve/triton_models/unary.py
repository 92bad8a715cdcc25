"""A non-decoupled twin of a decoupled model (ensemble_unary, tensorrt_llm_unary).

Triton refuses unary inference (HTTP /infer, gRPC ModelInfer) on decoupled models and on ensembles
that contain one, while streaming needs decoupled. This model takes the same inputs, forces
streaming off, calls the decoupled target (as a gRPC client of its own server, like the relay:
decoupled BLS read from several threads deadlocks a stub, pipeline/backend_grpc.py) and returns its
single answer, so unary clients
and streaming clients share one engine and one batch. Errors keep their meaning: a client error
stays INVALID_ARG, "busy" and timeouts become UNAVAILABLE (503), a cancel CANCELLED; one request that
fails never fails the others of its batch."""

import asyncio
import json

import triton_python_backend_utils as pb_utils

from llmserve.errors import triton_error
from llmserve.logs import to_triton
from llmserve.pipeline.backend_grpc import Backend
from llmserve.pipeline.triton_glue import parameters

STREAM_INPUTS = ("stream", "streaming")  # never forwarded: the twin always asks for one answer


def _is_stop(request) -> bool:
    t = pb_utils.get_input_tensor_by_name(request, "stop")
    return t is not None and bool(t.as_numpy().any())


class TritonPythonModel:
    def initialize(self, args):
        to_triton(pb_utils)  # llmserve's log records go to tritonserver's log (llmserve/logs.py)
        self.target = parameters(args)["target_model"]
        config = json.loads(args["model_config"])
        self.outputs = [o["name"] for o in config["output"]]
        self.backend = Backend()

    async def execute(self, requests):
        return await asyncio.gather(*(self._one(r) for r in requests))

    async def _one(self, request):
        try:
            return await self._forward(request)
        except Exception as e:  # this request only
            return self._error(f"{self.target}: {e}")

    def _error(self, message: str):
        # The target's error arrives as its message only: the message says its kind.
        return pb_utils.InferenceResponse(error=triton_error(pb_utils, message))

    async def _forward(self, request):
        inputs = [(t.name(), t.as_numpy()) for t in request.inputs() if t.name() not in STREAM_INPUTS]
        # The client's request id travels on, so a `stop` with it reaches the generation.
        # Its request parameters too: preprocessing refuses the unknown ones (HTTP generate makes
        # them of unknown JSON keys), which the twin must not drop in silence.
        stream = self.backend.stream(
            self.target, inputs, self.outputs, request.request_id(), json.loads(request.parameters() or "{}")
        )
        # The stream blocks while the target generates: read it off the event loop so the other
        # requests of this batch proceed concurrently.
        responses = await asyncio.to_thread(list, stream)
        answer = None
        for response in responses:
            if response.has_error():
                return self._error(response.error().message())
            if response.output_tensors():
                answer = response
        if answer is None:
            if _is_stop(request):  # upstream's `stop` request is answered with an empty OK response
                return pb_utils.InferenceResponse(output_tensors=[])
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{self.target} returned no output"))
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(t.name(), t.as_numpy()) for t in answer.output_tensors()]
        )
