"""The engine in a process of its own (engine.torch.engine_process: true).

Inside Triton the engine thread shares the stub's one GIL with the threads that build and send every
response: on the H200 the send side held the GIL more than the engine thread did, and the ensemble
reached 0.52-0.74 of the same engine run in-process (docs/perf-gpu.md). With this option the engine
loop (model, scheduling, sampling, stop words, grammars) runs in a child process with an interpreter
of its own (engine_child.serve), while the stub keeps the requests and builds and sends the responses.
The two talk over multiprocessing pipes: a step's outputs travel as one message, whatever the number of
sequences in it.

`EngineProcess` stands where EngineService otherwise holds an `Engine` (submit, cancel, health, stats,
start, shutdown). The Sequence a caller submits is the stub's copy: before each on_output call its
fields (generated, logprobs, top_ids, top_lps, gen_logits, emitted, keep, error, finish_reason) are
brought to what the engine's own Sequence held at that call, so callbacks read it as they read a
Sequence of an engine in the same process. is_cancelled() is asked here, by a poller thread of this
side, at the engine's period; a client that is gone is told to the child, which frees the request at
its next step. If the child dies, every request in it ends with an error and health() says so.

submit() does not wait for the child's answer: execute() of a stub hands over a request per pipe write,
and a refusal (the engine's queue full, the engine unhealthy, a grammar it cannot build) comes back later
as the Sequence's on_refused call, which answers that request with the same error response as a raise
would have. Waiting for each answer in turn held a batch of new requests for an IPC round trip each,
through both GILs: on an H100 the stub's execute took 17-53 ms a request at 64-128 streams, most of
the engine's TTFT inside Triton (docs/perf-gpu.md, call 19).

Callbacks run on the one thread that reads the child's messages, the refusals included: a
callback that blocks (a bounded send queue, as the stand-in's) holds every new request back, which is why
the stand-in keeps its engine on its own thread (pipeline/standin.py)."""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import shutil
import sys
import threading
import time

from ..engine import guided
from ..engine.sequence import EngineStats, Sequence
from ..errors import EngineBusy, EngineUnavailable
from ..finish import FinishReason
from ..logs import Throttle
from . import engine_child
from .engine_child import GuideRef
from .options import EngineOptions

READY_TIMEOUT_S = 1800.0  # building the engine loads the weights and captures CUDA graphs
ANSWER_TIMEOUT_S = 60.0  # a submit or compile the child does not answer in this long fails (busy child)
SILENT_AFTER_S = 30.0  # no state report for this long: the child is hung, the server is not ready
EXIT_TIMEOUT_S = 40.0

log = logging.getLogger(__name__)


def python_executable() -> str:
    """The interpreter to start the child with. In a Triton stub sys.executable is the stub binary
    (python_backend embeds Python), so this Python's own binary is looked for under its prefixes."""
    if os.path.basename(sys.executable).startswith("python"):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for prefix in dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)):
        path = os.path.join(prefix, "bin", version)
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(version)
    if found:
        return found
    raise RuntimeError(f"engine.torch.engine_process: no {version} interpreter found to start the engine process")


class _Answer:
    def __init__(self):
        self.event = threading.Event()
        self.value = None


class EngineProcess:
    def __init__(self, opts: EngineOptions, tokenizer_info_path: str | None = None):
        self.cancel_poll_s = opts.cancellation_check_period_ms / 1000
        ctx = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
        ctx.set_executable(python_executable())
        cmd_read, self._commands = ctx.Pipe(duplex=False)
        self._events, ev_write = ctx.Pipe(duplex=False)
        # Not a daemon: a daemonic process may not start processes of its own (torch's compile workers).
        # It stops when told, or when this side's end of the command pipe closes.
        self.proc = ctx.Process(
            target=engine_child.serve, args=(cmd_read, ev_write, opts, tokenizer_info_path), name="llmserve-engine"
        )
        self.proc.start()
        cmd_read.close()
        ev_write.close()
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._seqs: dict[int, Sequence] = {}
        self._gone: set[int] = set()  # told to the child already
        self._answers: dict[tuple[str, int], _Answer] = {}
        self.stats = EngineStats(
            kv_cache_capacity_tokens=opts.max_batch_size * (opts.max_input_len + opts.max_output_len)
        )
        self._health: str | None = None
        self._dead: str | None = None
        self._last_state = time.monotonic()
        self._stopping = False
        self._bye = threading.Event()
        self.throttle = Throttle(60.0)
        self.cfg = self._wait_ready()
        self._receiver = threading.Thread(target=self._receive, name="llmserve-engine-events", daemon=True)
        self._poller = threading.Thread(target=self._poll_cancelled, name="llmserve-cancel-poll", daemon=True)
        self._poller_stop = threading.Event()

    # --- what EngineService calls --------------------------------------------------------------
    def start(self) -> None:
        self._receiver.start()
        self._poller.start()

    def submit(self, seq: Sequence) -> None:
        """As Engine.submit, without waiting for the child: raises EngineUnavailable when the child is
        gone or stopping; a refusal by the child comes later, as seq.on_refused (module doc)."""
        if self._dead or self._stopping:
            raise EngineUnavailable(self._dead or "the server is shutting down")
        sid = next(self._ids)
        self._seqs[sid] = seq  # before the child can answer: its first output may come before the ack
        try:
            self._send(("submit", sid, seq.prompt, seq.params, seq.streaming, seq.key, seq.arrival))
        except OSError as e:
            self._seqs.pop(sid, None)
            raise EngineUnavailable(f"the engine process cannot be reached: {e}") from None
        except BaseException:
            self._seqs.pop(sid, None)
            raise

    def compile(self, guide_type: str, guide: str) -> GuideRef:
        """Validate and compile a guide in the child (cached there); raises guided.GuideError."""
        cid = next(self._ids)
        error = self._ask("compiled", cid, ("compile", cid, guide_type, guide))
        if error is not None:
            raise guided.GuideError(error)
        return GuideRef(guide_type, guide)

    def cancel(self, key: str) -> bool:
        here = any(s.key == key for s in list(self._seqs.values()))
        if here:
            self._send(("cancel", key))
        return here

    def health(self) -> str | None:
        if self._dead:
            return self._dead
        if not self.proc.is_alive():
            return f"the engine process ended (exit code {self.proc.exitcode})"
        silent = time.monotonic() - self._last_state
        if silent > SILENT_AFTER_S:
            return f"the engine process has not reported for {silent:.0f} s"
        return self._health

    def shutdown(self) -> None:
        """Stop the child; every request still in it is answered (error), none is lost."""
        self._stopping = True
        self._poller_stop.set()
        try:
            self._send(("shutdown",))
        except OSError:
            pass
        if not self._bye.wait(EXIT_TIMEOUT_S):
            log.warning("the engine process did not stop in %.0f s; killing it", EXIT_TIMEOUT_S)
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self._commands.close()
        self._fail_all("the server is shutting down")

    # --- the pipe --------------------------------------------------------------------------------
    def _send(self, message) -> None:
        with self._send_lock:
            self._commands.send(message)

    def _ask(self, kind: str, ident: int, message):
        answer = self._answers[(kind, ident)] = _Answer()
        try:
            self._send(message)
            if not answer.event.wait(ANSWER_TIMEOUT_S):
                raise EngineUnavailable(f"the engine process did not answer in {ANSWER_TIMEOUT_S:.0f} s")
            if isinstance(answer.value, EngineUnavailable):
                raise answer.value
            return answer.value
        except OSError as e:
            raise EngineUnavailable(f"the engine process cannot be reached: {e}") from None
        finally:
            self._answers.pop((kind, ident), None)

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._events.poll(1.0):
                try:
                    msg = self._events.recv()
                except EOFError:
                    break
                if msg[0] == "ready":
                    self._last_state = time.monotonic()
                    return msg[1]
                if msg[0] == "failed":
                    self.proc.join(10)
                    raise RuntimeError(f"the engine process could not build the engine: {msg[1]}")
                if msg[0] == "log":
                    self._log(*msg[1:])
            elif not self.proc.is_alive():
                break
        self.proc.kill()
        raise RuntimeError(f"the engine process did not start (exit code {self.proc.exitcode})")

    def _receive(self) -> None:
        try:
            while True:
                msg = self._events.recv()
                op = msg[0]
                if op == "out":
                    for item in msg[1]:
                        self._deliver(item)
                elif op == "state":
                    self._health, self.stats, self._last_state = msg[1], EngineStats(*msg[2]), time.monotonic()
                elif op == "ack":
                    if msg[2] is not None:
                        self._refused(msg[1], *msg[2])
                elif op == "compiled":
                    answer = self._answers.get((op, msg[1]))
                    if answer is not None:
                        answer.value = msg[2]
                        answer.event.set()
                elif op == "log":
                    self._log(*msg[1:])
                elif op == "bye":
                    self._bye.set()
                    return
        except (EOFError, OSError):
            self.proc.join(5)  # the pipe closes as the process dies: reap it, so its exit code is known
            code = self.proc.exitcode
            self._dead = (
                f"the engine process ended (exit code {code})" if code is not None else "the engine pipe closed"
            )
            if not self._stopping:
                log.error("%s; failing the requests in it", self._dead)
            self._bye.set()
            for answer in list(self._answers.values()):
                answer.value = EngineUnavailable(self._dead)
                answer.event.set()
            self._fail_all(self._dead)
        except BaseException:
            log.exception("the engine process's event thread ended unexpectedly")
            self._dead = "the engine process's event thread ended"
            raise

    def _refused(self, sid: int, kind: str, message: str) -> None:
        """The child refused a submit: answer that request as a raise from submit() would have."""
        seq = self._seqs.pop(sid, None)
        if seq is None:
            return
        error = {"busy": EngineBusy, "unavailable": EngineUnavailable}.get(kind, RuntimeError)(message)
        try:
            if seq.on_refused is not None:
                seq.on_refused(error)
            else:
                seq.finish_reason, seq.error = FinishReason.ERROR, message
                seq.on_output(seq, [], [], True, FinishReason.ERROR)
        except Exception as e:
            self.throttle.exception(
                log, e, "answering a refused request failed", level=logging.WARNING, request_id=seq.key
            )

    def _deliver(self, item) -> None:
        sid, emitted, generated, logprobs, top_ids, top_lps, rows, count, finished, reason, error, keep = item
        seq = self._seqs.get(sid)
        if seq is None:  # failed here already (a callback that raised)
            return
        seq.generated += generated
        seq.logprobs += logprobs
        seq.top_ids += top_ids
        seq.top_lps += top_lps
        seq.gen_logits += rows
        seq.emitted, seq.keep, seq.error = emitted, keep, error
        seq.finish_reason = FinishReason(reason) if reason is not None else None
        if finished:
            self._seqs.pop(sid, None)
            self._gone.discard(sid)
        try:
            seq.on_output(
                seq,
                seq.generated[emitted : emitted + count],
                seq.logprobs[emitted : emitted + count],
                finished,
                seq.finish_reason,
            )
        except Exception as e:  # as Engine._emit: only this request ends
            self.throttle.exception(
                log,
                e,
                "sending a response failed; the request is dropped",
                level=logging.WARNING,
                request_id=seq.key or None,
            )
            if not finished:
                self._tell_gone(sid)

    def _tell_gone(self, sid: int) -> None:
        if sid in self._gone:
            return
        self._gone.add(sid)
        try:
            self._send(("gone", sid))
        except OSError:
            pass

    def _poll_cancelled(self) -> None:
        """Every cancel_poll_s: ask each request whether its client is gone (an IPC round trip each in the
        Python backend, so never on the pipe's thread) and tell the child about the ones that are."""
        while not self._poller_stop.wait(self.cancel_poll_s):
            for sid, seq in list(self._seqs.items()):
                if sid in self._gone:
                    continue
                try:
                    if seq.is_cancelled():
                        self._tell_gone(sid)
                except Exception as e:  # an answer we cannot read: ask again at the next poll
                    self.throttle.exception(
                        log,
                        e,
                        "asking whether a request was cancelled failed",
                        level=logging.WARNING,
                        request_id=seq.key,
                    )

    def _fail_all(self, message: str) -> None:
        for sid in list(self._seqs):
            seq = self._seqs.pop(sid, None)
            if seq is None:
                continue
            seq.finish_reason, seq.error = FinishReason.ERROR, message
            try:
                seq.on_output(seq, [], [], True, FinishReason.ERROR)
            except Exception as e:
                self.throttle.exception(log, e, "answering a request failed", level=logging.WARNING, request_id=seq.key)

    @staticmethod
    def _log(name: str, level: int, text: str, request_id: str | None) -> None:
        logging.getLogger(name).log(level, "%s", text, extra={"request_id": request_id} if request_id else None)
