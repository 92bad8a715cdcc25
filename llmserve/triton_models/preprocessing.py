"""preprocessing: validates each request once (errors name the field, HTTP 400) and tokenizes the
dynamic batch in one tokenizer call. Logic: llmserve.pipeline.preprocess."""

import triton_python_backend_utils as pb_utils

from llmserve.logs import to_triton
from llmserve.pipeline.options import PreprocessOptions
from llmserve.pipeline.preprocess import Preprocessor
from llmserve.pipeline.triton_glue import error_response, parameters, reader, tensors
from llmserve.text.tokenizer import resolve_dir


class TritonPythonModel:
    def initialize(self, args):
        to_triton(pb_utils)  # llmserve's log records go to tritonserver's log (llmserve/logs.py)
        repo = args["model_repository"]
        self.pre = Preprocessor(PreprocessOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo)))

    def execute(self, requests):
        results = self.pre.process(
            [reader(r) for r in requests],
            [r.parameters() for r in requests],
            [r.request_id() for r in requests],
        )
        return [
            error_response(pb_utils, r)
            if isinstance(r, Exception)
            else pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, r))
            for r in results
        ]
