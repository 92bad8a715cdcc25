"""tensorrt_llm_cpp (CI stand-in): behaves like TensorRT-LLM's C++ backend at its tensor interface,
with llmserve's torch engine underneath. What it mirrors and how: llmserve.trtllm.standin.

Decoupled (as the generated C++ config is): execute() only checks and enqueues; the engine thread
sends every response."""

import json
import threading

import triton_python_backend_utils as pb_utils

from llmserve.engine.sequence import Sequence
from llmserve.finish import FinishReason
from llmserve.pipeline.engine_service import EngineService
from llmserve.pipeline.metrics import EngineMetrics
from llmserve.pipeline.options import EngineOptions
from llmserve.pipeline.triton_glue import parameters, reader, tensors
from llmserve.text.tokenizer import resolve_dir
from llmserve.pipeline import standin as S


def _final():
    return pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _error(message: str, code=None):
    # The C++ backend answers every failure with TRITONSERVER_ERROR_INTERNAL.
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code or pb_utils.TritonError.INTERNAL))


class TritonPythonModel:
    def initialize(self, args):
        repo = args["model_repository"]
        self.backend = S.read_parameters(parameters(args))  # fails the load as the C++ backend would
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))
        opts = EngineOptions.from_params(self.backend.standin, lambda d: resolve_dir(d, repo))
        self.service = EngineService(opts)
        self.max_seq_len = opts.max_input_len + opts.max_output_len
        self.active = S.ActiveRequests()
        self.metrics = EngineMetrics(pb_utils, self.service.engine, labels={"model": args["model_name"]})

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            read = reader(pb_utils, request)
            try:
                stop = read("stop")
                if stop is not None and bool(stop.reshape(-1)[0]):
                    self.active.stop(request.request_id())
                    sender.send(flags=_final())  # the backend's empty final response
                    continue
                model = self.service.model.cfg
                req = S.parse_request(
                    read, decoupled=self.decoupled, exclude_default=self.backend.exclude_input_in_output,
                    max_input_len=self.service.opts.max_input_len, max_seq_len=self.max_seq_len,
                    vocab_size=model.vocab_size, max_beam_width=self.backend.max_beam_width,
                    default_end_ids=tuple(model.eos_token_ids))
                self._submit(req, sender, request.request_id())
            except Exception as e:  # the backend answers enqueue failures with an error response
                sender.send(_error(str(e)), flags=_final())
        return None

    def _submit(self, req: S.BackendRequest, sender, triton_id: str):
        lock = threading.Lock()
        st = {"done": False, "stopped": False, "tokens": [], "logprobs": [], "cum": 0.0}
        want_lp = req.return_log_probs

        def cancel():  # `stop` from a client, or a stop word: the engine frees the slot at its next step
            st["stopped"] = True

        def finish(response=None):
            st["done"] = True
            self.active.remove(triton_id, cancel)
            if response is None:
                sender.send(flags=_final())
            else:
                sender.send(response, flags=_final())

        def whole():
            prefix = [] if req.exclude_input_in_output else req.prompt
            lps = [0.0] * len(prefix) + st["logprobs"]
            out = S.outputs(prefix + st["tokens"], lps if want_lp else None, st["cum"] if want_lp else None)
            return pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, out))

        def on_output(seq, tokens, logprobs, finished, reason):
            with lock:
                if st["done"]:
                    return
                if reason is FinishReason.CANCELLED and not st["stopped"]:
                    return finish(_error("Request was cancelled", pb_utils.TritonError.CANCELLED))
                if reason in (FinishReason.ERROR, FinishReason.TIMEOUT):
                    return finish(_error(f"Executor failed process requestId {seq.id} due to the following "
                                         f"error: {seq.error or reason.value}"))
                for i, (tok, lp) in enumerate(zip(tokens, logprobs)):
                    st["tokens"].append(tok)
                    st["logprobs"].append(lp)
                    st["cum"] += lp
                    hit = S.ends_with_stop_word(st["tokens"], req.stop_words)
                    last = hit or (finished and i == len(tokens) - 1)
                    if req.streaming:  # one response per new token; the last one carries FINAL
                        out = S.outputs([tok], [lp] if want_lp else None, st["cum"] if want_lp else None)
                        response = pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, out))
                        if last:
                            if hit:
                                cancel()
                            return finish(response)
                        sender.send(response)
                    elif hit:
                        cancel()
                        return finish(whole())
                if finished:
                    # Streaming: ended on the end token (or was stopped) with no new token to carry
                    # the flag: an empty final response, as the backend sends.
                    return finish() if req.streaming else finish(whole())

        self.active.add(triton_id, cancel)
        # Always streamed inside: stop words are matched token by token, as the executor does.
        seq = Sequence(prompt=req.prompt, params=req.params, on_output=on_output, streaming=True,
                       is_cancelled=lambda: st["stopped"] or sender.is_cancelled())
        self.service.engine.submit(seq)

    def finalize(self):
        self.metrics.close()
        self.service.shutdown()
