"""The engine's own process (engine.torch.engine_process): what runs on the far side of
engine_process.EngineProcess. Its main thread reads the stub's commands; the engine thread steps as
in the stub and ships each step's outputs as one message (its prefill's first tokens as one before
it); a state thread reports health and counters every STATE_PERIOD_S (also the stub's sign that this
process is alive). Log records go to the stub, which writes them to tritonserver's log.

Messages are tuples, pickled by multiprocessing's connections. To the child: ("submit", sid, prompt,
params, streaming, key, arrival), ("compile", cid, guide_type, guide), ("cancel", key), ("gone", sid),
("shutdown",). From it: ("ready", cfg) or ("failed", why), ("ack", sid, refusal or None),
("compiled", cid, error or None), ("out", [Shipped...]), ("state", health, stats), ("log", ...), ("bye",).

A Shipped tuple is one on_output call: (sid, emitted, new generated ids, their log-probs, top ids, top
log-probs, logits rows, count of tokens handed over, finished, reason value, error, keep); the lists
hold what the sequence generated since the last one shipped (each token travels once), so the stub's
copy of the Sequence reads as the engine's does at the moment of the call."""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

from ..engine import guided
from ..engine.engine import Engine
from ..engine.sequence import Sequence
from ..errors import EngineBusy, EngineUnavailable
from .engine_build import build_engine
from .options import EngineOptions

STATE_PERIOD_S = 0.1  # also how stale the stub's counters (metrics) may be

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuideRef:
    """A guide the child compiled (and validated) already: what travels in SamplingParams.grammar, since
    a compiled xgrammar grammar does not pickle; the child compiles it again from its cache."""

    guide_type: str
    guide: str


def refusal(e: Exception) -> tuple[str, str]:
    """How a refused submit travels back: the exception's kind and message (engine_process raises it again)."""
    kind = "busy" if isinstance(e, EngineBusy) else "unavailable" if isinstance(e, EngineUnavailable) else "error"
    return kind, f"{e}" if kind != "error" else f"{type(e).__name__}: {e}"


class _Wire:
    """The child's end of the event pipe; several threads send (engine, state, main, logging)."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, message) -> None:
        with self.lock:
            self.conn.send(message)


class _Outbox:
    """The on_output calls of one step, shipped together when the step ends."""

    def __init__(self, wire: _Wire, live: dict[int, Sequence]):
        self.wire, self.live = wire, live
        self.items: list[tuple] = []
        self.lock = threading.Lock()

    def callback(self, sid: int):
        shipped = [0]  # tokens of the sequence's `generated` already shipped to the stub

        def on_output(seq: Sequence, tokens, logprobs, finished, reason):
            n = shipped[0]
            rows = seq.gen_logits[n:]
            for i in range(n, len(seq.gen_logits)):  # shipped: the child keeps no vocab-sized rows
                seq.gen_logits[i] = None
            item = (
                sid,
                seq.emitted,
                seq.generated[n:],
                seq.logprobs[n:],
                seq.top_ids[n:],
                seq.top_lps[n:],
                rows,
                len(tokens),
                finished,
                reason.value if reason is not None else None,
                seq.error,
                seq.keep,
            )
            shipped[0] = len(seq.generated)
            if finished:
                self.live.pop(sid, None)
            with self.lock:
                self.items.append(item)

        return on_output

    def flush(self) -> None:
        with self.lock:
            items, self.items = self.items, []
        if items:
            self.wire.send(("out", items))


class _PipeLogHandler(logging.Handler):
    def __init__(self, wire: _Wire):
        super().__init__()
        self.wire = wire

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self.wire.send(("log", record.name, record.levelno, text, getattr(record, "request_id", None)))
        except Exception:  # the stub is gone: nobody to tell
            pass


def _child_engine(outbox: _Outbox) -> type:
    class ChildEngine(Engine):
        """Ships what a step (or a failure of all requests) handed to the callbacks, in one message, and
        the first tokens of the requests a step admitted as soon as their prefill has sampled them: a
        step prefills its new requests and then decodes the running ones, and an engine on the stub's
        thread hands a first token to its sender at once, so shipping it only at the step's end would
        add one decode step to every request's time to first token here alone."""

        def step(self) -> None:
            try:
                super().step()
            finally:
                outbox.flush()

        def _prefill(self, seqs: list[Sequence]) -> None:
            try:
                super()._prefill(seqs)
            finally:
                outbox.flush()

        def _fail_all(self, message: str) -> None:
            super()._fail_all(message)
            outbox.flush()

    return ChildEngine


def serve(commands: Connection, events: Connection, opts: EngineOptions, tokenizer_info_path: str | None) -> None:
    """The child's main: build and start the engine, say ready, then run the stub's commands until it
    says shutdown or its end of the pipe closes (the stub is gone: then the engine stops too)."""
    wire = _Wire(events)
    root = logging.getLogger()
    root.addHandler(_PipeLogHandler(wire))
    root.setLevel(logging.INFO)
    live: dict[int, Sequence] = {}
    outbox = _Outbox(wire, live)
    try:
        built = build_engine(opts, tokenizer_info_path, engine_cls=_child_engine(outbox))
    except BaseException as e:
        log.exception("the engine could not be built")
        wire.send(("failed", f"{type(e).__name__}: {e}"))
        return
    engine = built.engine
    engine.start()
    stopping = threading.Event()

    def report() -> None:
        while not stopping.wait(STATE_PERIOD_S):
            wire.send(("state", engine.health(), dataclasses.astuple(engine.stats)))

    threading.Thread(target=report, name="llmserve-engine-state", daemon=True).start()
    wire.send(("ready", built.cfg))
    try:
        while True:
            try:
                msg = commands.recv()
            except EOFError:
                log.warning("the stub's end of the engine pipe closed; stopping the engine")
                break
            op = msg[0]
            if op == "submit":
                _submit(engine, built.grammars, outbox, live, wire, *msg[1:])
            elif op == "gone":
                seq = live.get(msg[1])
                if seq is not None:
                    seq.client_gone = True  # freed at the engine's next step
            elif op == "cancel":
                engine.cancel(msg[1])
            elif op == "compile":
                _, cid, guide_type, guide = msg
                try:
                    built.grammars.compile(guide_type, guide)
                    wire.send(("compiled", cid, None))
                except guided.GuideError as e:
                    wire.send(("compiled", cid, str(e)))
            elif op == "shutdown":
                break
    finally:
        engine.shutdown()  # answers what is left (errors), shipped by _fail_all
        stopping.set()
        outbox.flush()
        try:
            wire.send(("bye",))
        except OSError:
            pass


def _submit(engine: Engine, grammars, outbox: _Outbox, live, wire: _Wire, sid, prompt, params, streaming, key, arrival):
    try:
        if isinstance(params.grammar, GuideRef):
            params.grammar = grammars.compile(params.grammar.guide_type, params.grammar.guide)
        seq = Sequence(
            prompt=prompt, params=params, on_output=outbox.callback(sid), streaming=streaming, key=key, arrival=arrival
        )
        live[sid] = seq
        engine.submit(seq)
    except Exception as e:
        live.pop(sid, None)
        wire.send(("ack", sid, refusal(e)))
        return
    wire.send(("ack", sid, None))
