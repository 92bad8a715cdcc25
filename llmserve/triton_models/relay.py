"""tensorrt_llm (engine: tensorrtllm): the token relay in front of the C++ backend model
(tensorrt_llm_cpp). Same token-level contract as the torch engine; logic: llmserve.pipeline.relay
(a thread per request, the backend read over gRPC, stop forwarding, cancellation)."""

import json

import triton_python_backend_utils as pb_utils

from llmserve.logs import to_triton
from llmserve.pipeline.options import RelayOptions
from llmserve.pipeline.relay import Relay
from llmserve.pipeline.triton_glue import parameters
from llmserve.text.tokenizer import load_fast, resolve_dir


class TritonPythonModel:
    def initialize(self, args):
        to_triton(pb_utils)  # llmserve's log records go to tritonserver's log (llmserve/logs.py)
        repo = args["model_repository"]
        opts = RelayOptions.from_params(parameters(args), lambda d: resolve_dir(d, repo))
        decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        self.relay = Relay(pb_utils, opts, load_fast(opts.tokenizer_dir), decoupled)

    def execute(self, requests):
        return self.relay.execute(requests)
