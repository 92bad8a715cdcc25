"""User errors. Every one names the request field at fault and becomes HTTP 400 /
gRPC INVALID_ARGUMENT in the model.py adapters; never an assert, never a crash."""


class RequestError(ValueError):
    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
