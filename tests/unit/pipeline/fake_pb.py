"""A fake triton_python_backend_utils, enough for the pipeline classes that take `pb`: tensors,
requests with a response sender, responses, errors and decoupled BLS calls to a scripted model."""

from __future__ import annotations

import numpy as np

from llmserve.pipeline.cancellation import stop_arrays

FINAL = 1


class Tensor:
    def __init__(self, name, value):
        self._name, self.value = name, np.asarray(value)

    def name(self):
        return self._name

    def as_numpy(self):
        return self.value


class TritonError:
    CANCELLED, UNAVAILABLE, INTERNAL, INVALID_ARG = "CANCELLED", "UNAVAILABLE", "INTERNAL", "INVALID_ARG"

    def __init__(self, message, code="INTERNAL"):
        self._message, self.code = message, code

    def message(self):
        return self._message


class InferenceResponse:
    def __init__(self, output_tensors=(), error=None):
        self._outputs, self._error = list(output_tensors), error

    def output_tensors(self):
        return self._outputs

    def names(self):
        return [t.name() for t in self._outputs]

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


class Sender:
    def __init__(self, cancelled=lambda: False):
        self.sent: list[tuple[InferenceResponse | None, int]] = []
        self.polls = 0
        self._cancelled = cancelled

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))

    def is_cancelled(self):
        self.polls += 1
        return self._cancelled()


class Request:
    def __init__(self, inputs: dict, request_id="", wanted=(), sender: Sender | None = None):
        self._inputs = [Tensor(k, v) for k, v in inputs.items()]
        self._id, self._wanted = request_id, list(wanted)
        self.sender = sender or Sender()
        self.cancelled = False
        self.polls = 0

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._id

    def requested_output_names(self):
        return self._wanted

    def get_response_sender(self):
        return self.sender

    def is_cancelled(self):
        self.polls += 1
        return self.cancelled


class FakePb:
    """One instance per test: `models[name](request)` answers a BLS call with a list of responses;
    every BLS request is kept in `calls`."""

    TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL
    Tensor, TritonError, InferenceResponse = Tensor, TritonError, InferenceResponse

    def __init__(self, models: dict | None = None):
        self.models = models or {}
        self.calls: list[BLSRequest] = []
        pb = self

        class InferenceRequest(BLSRequest):
            def __init__(self, **kw):
                super().__init__(pb, **kw)
                pb.calls.append(self)

        self.InferenceRequest = InferenceRequest

    @staticmethod
    def get_output_tensor_by_name(response, name):
        return next((t for t in response.output_tensors() if t.name() == name), None)


class BLSRequest:
    def __init__(self, pb, model_name, inputs, requested_output_names, request_id=""):
        self.pb, self.model_name, self.inputs = pb, model_name, inputs
        self.requested_output_names, self.request_id = requested_output_names, request_id

    def input(self, name):
        return next((t.as_numpy() for t in self.inputs if t.name() == name), None)

    def exec(self, decoupled=False):
        return iter(self.pb.models[self.model_name](self))


def outputs_of(response: InferenceResponse) -> dict[str, np.ndarray]:
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


class FakeBackend:
    """The relay's backend (pipeline/backend_grpc.Backend's interface) answered by a FakePb's models, each
    call kept in the FakePb's `calls` as a BLS request would be."""

    def __init__(self, pb: FakePb):
        self.pb = pb

    def stream(self, model, inputs, outputs, request_id):
        tensors = [Tensor(name, arr) for name, arr in inputs]
        req = self.pb.InferenceRequest(
            model_name=model, inputs=tensors, requested_output_names=outputs, request_id=request_id
        )
        return req.exec(decoupled=True)

    def stop(self, model, request_id):
        return not any(r.has_error() for r in self.stream(model, stop_arrays(), ["output_ids"], request_id))
