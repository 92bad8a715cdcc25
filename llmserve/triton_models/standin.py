"""tensorrt_llm_cpp (CI stand-in): behaves like TensorRT-LLM's C++ backend at its tensor interface,
with llmserve's torch engine underneath. What it mirrors and how: llmserve.pipeline.standin.

Decoupled (as the generated C++ config is): execute() only checks and enqueues; the engine thread
hands every response to the stand-in's send threads (as the backend's response thread sends them)."""

import gc
import json

import triton_python_backend_utils as pb_utils

from llmserve.finish import FinishReason
from llmserve.logs import to_triton
from llmserve.pipeline.metrics import EngineMetrics
from llmserve.pipeline.standin import Standin
from llmserve.pipeline.triton_glue import StreamSender, parameters, reader
from llmserve.text.tokenizer import resolve_dir


class TritonPythonModel:
    def initialize(self, args):
        to_triton(pb_utils)  # llmserve's log records go to tritonserver's log (llmserve/logs.py)
        repo = args["model_repository"]
        decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        self.standin = Standin(parameters(args), lambda d: resolve_dir(d, repo), decoupled)
        self.metrics = EngineMetrics(pb_utils, self.standin.engine, labels={"model": args["model_name"]})

    def execute(self, requests):
        for request in requests:
            send = StreamSender(
                pb_utils, request, self.standin.sends
            )  # only the requested outputs (triton_glue.tensors)
            read = reader(request)
            try:
                stop = read("stop")
                if stop is not None and bool(stop.reshape(-1)[0]):
                    self.standin.stop(request.request_id())
                    send(None, True)  # the backend's empty final response
                    continue
                self.standin.submit(self.standin.parse(read), send, send.is_cancelled, request.request_id())
            except Exception as e:  # the backend answers enqueue failures with an error response (INTERNAL)
                send(None, True, FinishReason.ERROR, str(e))
        return None

    def finalize(self):
        self.metrics.close()
        self.standin.shutdown()
        # On the H200 (Python 3.12 stubs) this stub segfaulted at every unload in python_backend's
        # ResponseSender destructor, called by the garbage collector inside Py_FinalizeEx, after the
        # stub's shared memory is gone. A finished stream and its engine Sequence refer to each other
        # (StandinStream.seq), so only the collector frees them and their senders: collected here, it runs
        # while the stub is whole. (Not reproduced on this CPU's 3.12 stub; not yet re-run on the H200.)
        gc.collect()
