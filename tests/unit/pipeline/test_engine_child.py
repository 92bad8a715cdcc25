"""The engine's process ships each step's outputs in one message, and a newly admitted request's first
token before the step's decode of the others: shipped only at the step's end, every first token would
wait one decode step longer than it does with the engine on the stub's thread."""

import torch

from llmserve.engine.llama import LlamaModel
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence
from llmserve.pipeline.engine_child import _child_engine, _Outbox
from llmserve.text.tokenizer import load_fast

from ..engine.helpers import make_engine


class _Wire:
    """Records what the child would send to the stub, in order with the engine's decode calls."""

    def __init__(self, log: list):
        self.log = log

    def send(self, message) -> None:
        if message[0] == "out":
            self.log.append(("out", sorted((item[0], len(item[2])) for item in message[1])))


def test_first_tokens_ship_before_the_decode_step_that_follows_their_prefill(tiny_llama):
    events: list = []
    live: dict[int, Sequence] = {}
    outbox = _Outbox(_Wire(events), live)
    base = _child_engine(outbox)

    class Recorded(base):
        def _decode(self, seqs):
            events.append(("decode", len(seqs)))
            super()._decode(seqs)

    model = LlamaModel(tiny_llama, torch.device("cpu"), torch.float32, max_slots=2, max_seq_len=64)
    engine = make_engine(model, load_fast(tiny_llama), stream_interval_s=0.0, engine_cls=Recorded)

    def submit(sid: int) -> None:
        seq = Sequence(
            prompt=[1, 2, 3],
            params=SamplingParams(max_new_tokens=4, min_tokens=4),
            on_output=outbox.callback(sid),
        )
        live[sid] = seq
        engine.submit(seq)

    submit(1)
    engine.step()  # request 1 alone: its prefill, nothing to decode
    assert events == [("out", [(1, 1)])]
    events.clear()
    submit(2)
    engine.step()  # request 2's prefill, then request 1's decode
    assert events == [("out", [(2, 1)]), ("decode", 1), ("out", [(1, 1)])]
