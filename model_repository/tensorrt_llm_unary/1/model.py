"""A non-decoupled twin of a decoupled model (ensemble_unary, tensorrt_llm_unary).

Triton refuses unary inference (HTTP /infer, gRPC ModelInfer) on decoupled models and on ensembles
that contain one, while streaming needs decoupled. This model takes the same inputs, forces
streaming off, calls the decoupled target over BLS and returns its single answer, so unary clients
and streaming clients share one engine and one batch."""

import asyncio
import json

import triton_python_backend_utils as pb_utils

from llmserve.errors import is_request_error
from llmserve.pipeline.triton_glue import parameters

STREAM_INPUTS = ("stream", "streaming")  # never forwarded: the twin always asks for one answer


class TritonPythonModel:
    def initialize(self, args):
        self.target = parameters(args)["target_model"]
        config = json.loads(args["model_config"])
        self.outputs = [o["name"] for o in config["output"]]

    async def execute(self, requests):
        return await asyncio.gather(*(self._one(r) for r in requests))

    async def _one(self, request):
        inputs = [t for t in request.inputs() if t.name() not in STREAM_INPUTS]
        bls = pb_utils.InferenceRequest(model_name=self.target, inputs=inputs, requested_output_names=self.outputs)
        # The iterator blocks while the target generates: drain it off the event loop so the
        # other requests of this batch proceed concurrently.
        responses = await asyncio.to_thread(list, await bls.async_exec(decoupled=True))
        answer = None
        for response in responses:
            if response.has_error():
                message = response.error().message()
                code = pb_utils.TritonError.INVALID_ARG if is_request_error(message) else pb_utils.TritonError.INTERNAL
                return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
            if response.output_tensors():
                answer = response
        if answer is None:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{self.target} returned no output"))
        return pb_utils.InferenceResponse(output_tensors=answer.output_tensors())
