"""postprocessing: exact detokenization of whole outputs and of streamed chunks (llmserve.text.detokenize),
for the whole dynamic batch in one tokenizer call."""

import numpy as np
import triton_python_backend_utils as pb_utils

from llmserve.pipeline.cancel_relay import CancelRelay
from llmserve.pipeline.options import PostprocessOptions
from llmserve.pipeline.triton_glue import error_response, parameters, reader
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast, resolve_dir


class TritonPythonModel:
    def initialize(self, args):
        repo = args["model_repository"]
        opts = PostprocessOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo))
        self.detok = Detokenizer(load_fast(opts.tokenizer_dir), skip_special_tokens=opts.skip_special_tokens)
        self.cancel = CancelRelay(pb_utils)  # a cancelled ensemble request stops its generation

    def execute(self, requests):
        responses, items, owners = [None] * len(requests), [], []  # owners[k]: (request index, beams)
        for i, request in enumerate(requests):
            if self.cancel.cancelled(request):
                responses[i] = self.cancel.cancelled_response()
                continue
            read = reader(pb_utils, request)
            try:
                ids, lengths = read("output_ids"), read("sequence_length")  # [1, beam, n], [1, beam]
                context = read("output_context_ids")  # [1, beam, <= CONTEXT_TOKENS] or absent
                beams = [(ids[0, b, : lengths[0, b]].tolist(), context[0, b].tolist() if context is not None else [])
                         for b in range(ids.shape[1])]
            except Exception as e:  # a malformed tensor from a direct caller: an error, not a crash
                responses[i] = error_response(pb_utils, e)
                continue
            owners.append((i, len(beams)))
            items.extend(beams)
        texts = iter(self.detok.decode_many(items)) if items else iter(())
        for i, beams in owners:
            out = np.array([[next(texts).encode("utf-8") for _ in range(beams)]], dtype=np.object_)
            responses[i] = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", out)])
        return responses
