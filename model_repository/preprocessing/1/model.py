"""preprocessing: validates each request once (errors name the field, HTTP 400) and tokenizes the
dynamic batch in one tokenizer call. Logic: llmserve.preprocess."""

import triton_python_backend_utils as pb_utils

from llmserve.preprocess import PreprocessOptions, Preprocessor
from llmserve.tokenizer import resolve_dir
from llmserve.triton_glue import error_response, parameters, reader, tensors


class TritonPythonModel:
    def initialize(self, args):
        p = parameters(args)
        truthy = ("1", "true", "yes")
        self.pre = Preprocessor(PreprocessOptions(
            tokenizer_dir=resolve_dir(p["tokenizer_dir"], args["model_repository"]),
            apply_chat_template=p["apply_chat_template"] in truthy, add_special_tokens=p["add_special_tokens"] in truthy,
            max_input_len=int(p["max_input_len"]), max_output_len=int(p["max_output_len"]),
            max_beam_width=int(p["max_beam_width"]), trust_remote_code=p["trust_remote_code"] in truthy,
        ))

    def execute(self, requests):
        results = self.pre.process([reader(pb_utils, r) for r in requests])
        return [error_response(pb_utils, r) if isinstance(r, Exception)
                else pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, r)) for r in results]
