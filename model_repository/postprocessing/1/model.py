"""postprocessing: exact detokenization of whole outputs and of streamed chunks, for the whole
dynamic batch in one tokenizer call, and the log-prob outputs (llmserve.pipeline.postprocess). A step
of a cancelled ensemble request stops its generation (llmserve.pipeline.cancellation)."""

import triton_python_backend_utils as pb_utils

from llmserve.logs import to_triton
from llmserve.pipeline.cancellation import CancelRelay
from llmserve.pipeline.options import PostprocessOptions
from llmserve.pipeline.postprocess import postprocess_batch
from llmserve.pipeline.triton_glue import error_response, parameters, reader, tensors
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast, resolve_dir


class TritonPythonModel:
    def initialize(self, args):
        to_triton(pb_utils)  # llmserve's log records go to tritonserver's log (llmserve/logs.py)
        repo = args["model_repository"]
        opts = PostprocessOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo))
        self.detok = Detokenizer(load_fast(opts.tokenizer_dir), skip_special_tokens=opts.skip_special_tokens)
        # A cancelled ensemble request stops its generation; is_cancelled() asked once per period per request.
        self.cancel = CancelRelay(pb_utils, opts.cancellation_check_period_ms / 1000)

    def execute(self, requests):
        reads = [reader(r) for r in requests]
        for request, read in zip(requests, reads):
            self.cancel.cancelled(request, read)  # sends the stop; the step is answered as usual, never with an error
        results = postprocess_batch(self.detok, reads)
        return [
            error_response(pb_utils, r)
            if isinstance(r, Exception)
            else pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, r))
            for r in results
        ]
