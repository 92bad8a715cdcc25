"""In-flight batching: one thread owns the model and loops
    admit waiting requests into free cache slots -> prefill them together -> one decode step for
    every running sequence -> hand new tokens to each request's callback,
so a request that arrives while others generate joins the very next step.

Scheduling policy: prefill first (new requests get their first token at the next step, at the
cost of one longer step for the running ones), bounded by `prefill_token_budget` tokens per step
so a burst of long prompts cannot stall running streams for long.

Health: a step that raises fails the requests in it (and only those, plus the ones waiting); after
MAX_CONSECUTIVE_FAILURES failed steps in a row, or if the loop ends other than by shutdown(), the
engine is unhealthy for good: it refuses new requests (EngineUnavailable) and `health()` says why, so
the adapter can take the server out of rotation (pipeline/health.py). A step running longer than
`stall_s` counts as unhealthy too (a hung device).

Logs: a failed step is logged with its traceback (at most one per minute per distinct error, with a
count of the ones left out: a step that fails every time must not flood the log), and so are a
failing sampling row and a failing callback, with the request id; each finished request gets one
DEBUG line (tritonserver's verbose level) with its id, reason and token counts."""

from __future__ import annotations

import heapq
import logging
import secrets
import threading
import time
from collections import deque

import torch

from ..errors import EngineBusy, EngineUnavailable
from ..finish import FinishReason
from ..logs import Throttle
from ..text.stop_words import StopMatcher, ends_with_any
from . import guided
from .llama import LlamaModel
from .sampling import sample
from .sequence import EngineStats, Sequence

MAX_CONSECUTIVE_FAILURES = 3  # failed steps in a row after which the engine is declared unhealthy
TRACEBACK_INTERVAL_S = 60.0  # one full traceback per distinct error per minute; the others are counted

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        model: LlamaModel,
        tokenizer,
        *,
        prefill_token_budget: int,
        skip_special_tokens: bool,
        max_waiting: int,
        request_timeout_s: float,
        stream_interval_s: float,
        cancel_poll_s: float,
        stall_s: float = 120.0,
    ):
        """Every knob comes from the spec (pipeline/options.EngineOptions); none is defaulted here.
        max_waiting 0 means no bound (as max_queue_size 0 does for Triton's own queue). cancel_poll_s:
        is_cancelled() is an IPC round trip per request in the Python backend, so it is asked at most
        this often (the spec's cancellation_check_period_ms, the period TensorRT-LLM's backend polls at).
        A started engine asks on a thread of its own (`_poll_cancelled`), as TensorRT-LLM's backend does
        (model_instance_state.cc WaitForCancel), so no step waits for up to one round trip per request;
        on the H200 the move changed no throughput beyond the spread (docs/perf-gpu.md). An engine driven
        inline by step() (tests, benchmarks) asks inside the step."""
        self.cancel_poll_s = cancel_poll_s
        self.model = model
        self.stall_s = stall_s
        self.stream_interval_s = stream_interval_s
        self.max_waiting = max_waiting
        self.request_timeout_s = request_timeout_s
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.prefill_token_budget = prefill_token_budget
        self.free_slots = list(range(model.max_slots))  # a heap: lowest slot first keeps rows compact
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = EngineStats(kv_cache_capacity_tokens=model.max_slots * model.max_seq_len)
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_keys: set[str] = set()  # request ids a `stop` request asked to cancel (next step)
        self._last_cancel_poll = float("-inf")
        self._poller: threading.Thread | None = None  # started: is_cancelled() is asked there, not in step()
        self._poller_stop = threading.Event()
        self._step_started: float | None = None
        self.consecutive_failures = 0
        self.unhealthy: str | None = None  # why the engine cannot serve any more (None: healthy)
        self.throttle = Throttle(TRACEBACK_INTERVAL_S)

    # --- public API (thread-safe) --------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        p = seq.params
        if p.stop_words:
            seq.stop = StopMatcher(self.tokenizer, p.stop_words, self.skip_special_tokens)
        if p.grammar is not None:
            seq.matcher = guided.matcher(p.grammar, p.end_ids)
        if not p.greedy:
            seed = p.seed if p.seed is not None else secrets.randbits(63)
            seq.generator = torch.Generator(device=self.model.device).manual_seed(seed)
        seq.deadline = seq.arrival + self.request_timeout_s
        with self._cv:
            if self.unhealthy or self._stopping:
                raise EngineUnavailable(self.unhealthy or "the server is shutting down")
            if self.max_waiting and len(self.waiting) >= self.max_waiting:
                self.stats.rejected += 1
                raise EngineBusy(
                    f"{len(self.waiting)} requests already wait for the engine "
                    f"(engine.queue.max_queue_size); retry later"
                )
            self.waiting.append(seq)
            self._cv.notify()

    def cancel(self, key: str) -> bool:
        """Cancel every request with this id at the next step (a `stop` request, upstream's way to
        cancel by request id). True if one is here (waiting or running) now."""
        with self._cv:
            here = any(s.key == key for s in self.waiting) or any(s.key == key for s in list(self.running))
            if here:
                self._stop_keys.add(key)
                self._cv.notify()
        return here

    def health(self) -> str | None:
        """None when the engine can serve, else why not."""
        if self.unhealthy:
            return self.unhealthy
        if self._thread is not None and not self._thread.is_alive() and not self._stopping:
            return "the engine thread ended"
        started = self._step_started
        if started is not None and time.monotonic() - started > self.stall_s:
            return f"an engine step has been running for more than {self.stall_s:g} s"
        return None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="llmserve-engine", daemon=True)
        self._poller = threading.Thread(target=self._poll_cancelled, name="llmserve-cancel-poll", daemon=True)
        self._thread.start()
        self._poller.start()

    def shutdown(self) -> None:
        """Stop the loop; every request still waiting or running is answered (error), none is lost."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._poller_stop.set()
        if self._thread:
            self._thread.join(timeout=30)
        if self._poller:
            self._poller.join(timeout=5)
        if self._thread is None or not self._thread.is_alive():
            self._fail_all("the server is shutting down")

    # --- the loop ------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._stopping and not self.waiting and not self.running:
                        self._cv.wait()
                    if self._stopping:
                        return
                self._step_started = time.monotonic()
                try:
                    self.step()
                    self.consecutive_failures = 0
                except Exception as e:  # never die silently: fail the requests in flight, keep serving
                    self.stats.step_failures += 1
                    self.consecutive_failures += 1
                    ids = [s.key for s in self.running if s.key]
                    self.throttle.exception(
                        log,
                        e,
                        "engine step failed (%d in a row; requests failed: %s)",
                        self.consecutive_failures,
                        ", ".join(ids[:16]) or "none with an id",
                    )
                    self._fail_all(f"engine step failed: {type(e).__name__}: {e}")
                    if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
                        self.unhealthy = (
                            f"{self.consecutive_failures} engine steps failed in a row (last: {type(e).__name__}: {e})"
                        )
                        log.error("engine unhealthy, refusing new requests: %s", self.unhealthy)
                        return
                finally:
                    self._step_started = None
        except BaseException:
            log.exception("the engine thread ended unexpectedly")
            raise
        finally:
            if not self._stopping and not self.unhealthy:
                self.unhealthy = "the engine thread ended unexpectedly"
            self._fail_all(self.unhealthy or "the server is shutting down")

    def _poll_cancelled(self) -> None:
        """Every cancel_poll_s: ask each request in the engine whether its client is gone and mark the
        ones that are; the engine thread frees them at its next step, without a round trip of its own."""
        while not self._poller_stop.wait(self.cancel_poll_s):
            with self._cv:
                candidates = list(self.waiting)
            gone = 0
            for s in candidates + list(self.running):  # (a copy: the engine thread changes the list)
                if s.client_gone or s.finish_reason is not None:
                    continue
                try:
                    s.client_gone = bool(s.is_cancelled())
                except Exception as e:  # an answer we cannot read: ask again at the next poll
                    self.throttle.exception(
                        log, e, "asking whether a request was cancelled failed", level=logging.WARNING, request_id=s.key
                    )
                gone += s.client_gone
            if gone:
                with self._cv:
                    self._cv.notify()

    def _fail_all(self, message: str) -> None:
        """Answer every request in the engine with an error. The waiting queue is swapped out under
        the lock, so a request submitted meanwhile is either failed here or served later, never lost."""
        with self._cv:
            waiting = list(self.waiting)
            self.waiting.clear()
        for seq in list(self.running) + waiting:
            self._finish(seq, FinishReason.ERROR, message)
        self._update_stats()

    def step(self) -> None:
        """One scheduling iteration (public so benchmarks and tests can drive the engine inline)."""
        self._drop_cancelled()
        admitted = self._admit()
        if admitted:
            self._prefill(admitted)
        decoding = [s for s in self.running if s not in admitted]
        if decoding:
            self._decode(decoding)
        self._update_stats()

    def _admit(self) -> list[Sequence]:
        admitted, budget = [], self.prefill_token_budget
        with self._cv:
            while self.waiting and self.free_slots:
                seq = self.waiting[0]
                if admitted and len(seq.prompt) > budget:
                    break
                self.waiting.popleft()
                seq.slot = heapq.heappop(self.free_slots)
                budget -= len(seq.prompt)
                admitted.append(seq)
        self.running.extend(admitted)
        now = time.monotonic()
        for seq in admitted:
            seq.admitted_at = now
            self.stats.queue_seconds += now - seq.arrival
        self.stats.admitted += len(admitted)
        return admitted

    def _prefill(self, seqs: list[Sequence]) -> None:
        graphs = self.model.prefill_graphs
        logits = graphs.run([s.prompt for s in seqs], [s.slot for s in seqs]) if graphs is not None else None
        if logits is None:
            logits = self._prefill_eager(seqs)
        self.stats.prompt_tokens += sum(len(s.prompt) for s in seqs)
        self._accept(self._sample(seqs, logits))

    def _prefill_eager(self, seqs: list[Sequence]) -> torch.Tensor:
        dev = self.model.device
        width = max(len(s.prompt) for s in seqs)
        tokens = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            tokens[i, : len(s.prompt)] = torch.tensor(s.prompt)
        positions = torch.arange(width).expand(len(seqs), width)
        last = torch.tensor([len(s.prompt) - 1 for s in seqs])
        slots = torch.tensor([s.slot for s in seqs])
        return self.model.forward(tokens.to(dev), slots.to(dev), positions.to(dev), last.to(dev), width)

    def _decode(self, seqs: list[Sequence]) -> None:
        kv_len = max(s.position for s in seqs) + 1
        graphs = self.model.graphs
        if graphs is None:
            dev = self.model.device
            tokens = torch.tensor([[s.generated[-1]] for s in seqs], device=dev)
            positions = torch.tensor([[s.position] for s in seqs], device=dev)
            slots = torch.tensor([s.slot for s in seqs], device=dev)
            picked = self._sample(seqs, self.model.forward(tokens, slots, positions, None, kv_len))
        else:
            picked = self._decode_graph(graphs, seqs, kv_len)
        self.stats.last_batch_size = len(seqs)
        self.stats.max_batch_size_seen = max(self.stats.max_batch_size_seen, len(seqs))
        self.stats.batched_steps += len(seqs) > 1
        self.stats.steps += 1
        self._accept(picked)

    def _decode_graph(self, graphs, seqs: list[Sequence], kv_len: int) -> list[tuple[Sequence, int, float]]:
        """The step's graph already computed every row's greedy token: rows that only need argmax
        take it (one read-back of two numbers per row); the others sample from the logits. A row
        still short of min_tokens whose argmax is an end token also re-samples (with the end
        tokens masked): argmax over the masked logits is the argmax unless that is masked."""
        # Guided rows: their grammar masks are filled on the CPU while the GPU runs the graph.
        pre = guided.masker([s.matcher for s in seqs])
        vocab = self.model.cfg.vocab_size
        res = graphs.step(
            [s.slot for s in seqs],
            [s.generated[-1] for s in seqs],
            [s.position for s in seqs],
            kv_len,
            overlap=(lambda: pre.fill(vocab)) if pre is not None else None,
        )
        picked, slow = [], []
        for i, s in enumerate(seqs):
            p, tok = s.params, res.tokens[i]
            # A guided row needs its grammar's mask, one that reports top log-probs or logits the whole row.
            plain = p.greedy and p.plain and s.matcher is None and not p.top_logprobs and not p.return_logits
            if plain and not (tok in p.end_ids and len(s.generated) < p.min_tokens):
                picked.append((s, tok, res.logprobs[i]))
            else:
                slow.append(i)
        if slow:
            mask = pre.subset(slow) if pre is not None else None
            picked += self._sample([seqs[i] for i in slow], res.logits(slow), mask)
        return picked

    def _sample(
        self, seqs: list[Sequence], logits: torch.Tensor, mask: guided.Masker | None = None
    ) -> list[tuple[Sequence, int, float]]:
        """Every path (prefill eager or graphed, decode eager, graphed rows that need more than argmax)
        samples here, so guided rows always get their grammar's mask (`mask`: one filled already, for
        these rows); a step without one does no grammar work (masker() is None)."""
        mask = mask or guided.masker([s.matcher for s in seqs])
        self._top_log_probs(seqs, logits)
        try:
            tokens, logprobs = sample(
                logits,
                [s.params for s in seqs],
                [s.prompt for s in seqs],
                [s.generated for s in seqs],
                [s.generator for s in seqs],
                constrain=mask,
            )
            return list(zip(seqs, tokens, logprobs))
        except Exception:  # isolate the culprit: one request's bad sampling must not fail the batch
            picked = []
            for i, s in enumerate(seqs):
                try:
                    (tok,), (lp,) = sample(
                        logits[i : i + 1],
                        [s.params],
                        [s.prompt],
                        [s.generated],
                        [s.generator],
                        constrain=guided.masker([s.matcher]),
                    )
                    picked.append((s, tok, lp))
                except Exception as e:
                    self.throttle.exception(
                        log,
                        e,
                        "sampling failed; the request ends with an error",
                        level=logging.WARNING,
                        request_id=s.key or None,
                    )
                    self._finish(s, FinishReason.ERROR, f"sampling failed: {e}")
            return picked

    def _top_log_probs(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        """The k most likely tokens of the rows that asked (params.top_logprobs), from the model's own
        distribution (the logits before any mask or penalty), as output_log_probs: one topk for the step.
        Rows with params.return_logits keep that logits row itself (copied to the host)."""
        for i, s in enumerate(seqs):
            if s.params.return_logits:
                s.pending_logits = logits[i].float().cpu().numpy()
        rows = [i for i, s in enumerate(seqs) if s.params.top_logprobs]
        if not rows:
            return
        k = max(seqs[i].params.top_logprobs for i in rows)
        index = torch.tensor(rows, device=logits.device)
        values, ids = torch.log_softmax(logits.index_select(0, index).float(), dim=-1).topk(k, dim=-1)
        for i, row_ids, row_values in zip(rows, ids.tolist(), values.tolist()):
            n = seqs[i].params.top_logprobs
            seqs[i].pending_top = (row_ids[:n], row_values[:n])

    def _accept(self, picked: list[tuple[Sequence, int, float]]) -> None:
        now = time.monotonic()
        steered = [(seq, tok) for seq, tok, _ in picked if seq.matcher is not None]
        grammar_ok = dict(
            zip((id(s) for s, _ in steered), guided.accept([s.matcher for s, _ in steered], [t for _, t in steered]))
        )
        for seq, tok, lp in picked:
            self.stats.generated_tokens += 1
            if seq.first_token_at is None:
                seq.first_token_at = now
                self.stats.first_tokens += 1
                self.stats.first_token_seconds += now - seq.arrival
            p = seq.params
            if seq.matcher is not None and not grammar_ok[id(seq)]:
                # Only when nothing the grammar allows survived the other masks (bad_words, ...).
                self._finish(seq, FinishReason.ERROR, f"guided decoding: token {tok} does not match the grammar")
                continue
            if tok in p.end_ids and len(seq.generated) >= p.min_tokens:
                seq.finish_reason = FinishReason.STOP  # the end token itself is not part of the output
            else:
                seq.generated.append(tok)
                seq.logprobs.append(lp)
                if seq.pending_top is not None:
                    seq.top_ids.append(seq.pending_top[0])
                    seq.top_lps.append(seq.pending_top[1])
                    seq.pending_top = None
                if seq.pending_logits is not None:
                    seq.gen_logits.append(seq.pending_logits)
                    seq.pending_logits = None
                if seq.stop is not None and (keep := seq.stop.push(tok)) is not None:
                    seq.keep, seq.finish_reason = keep, FinishReason.STOP_WORD
                elif p.stop_sequences and ends_with_any(seq.generated, p.stop_sequences):
                    # TensorRT-LLM's stop criterion: the word's tokens stay in the output.
                    seq.finish_reason = FinishReason.STOP_WORD
                elif len(seq.generated) >= p.max_new_tokens:
                    seq.finish_reason = FinishReason.LENGTH
            if seq.finish_reason:
                self._finish(seq, seq.finish_reason)
            elif seq.streaming and now - seq.last_emit_at >= self.stream_interval_s:
                safe = seq.stop.safe_tokens() if seq.stop else len(seq.generated)
                if safe > seq.emitted:
                    seq.last_emit_at = now
                    self._emit(seq, seq.generated[seq.emitted : safe], seq.logprobs[seq.emitted : safe], False, None)
                    seq.emitted = safe

    def _finish(self, seq: Sequence, reason: FinishReason, error: str | None = None) -> None:
        seq.finish_reason, seq.error = reason, error
        end = seq.keep if seq.keep is not None else len(seq.generated)
        end = max(end, seq.emitted)
        self._emit(seq, seq.generated[seq.emitted : end], seq.logprobs[seq.emitted : end], True, reason)
        seq.emitted = end
        self._release(seq)
        self.stats.finished += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "finished: %s, %d prompt + %d generated tokens, %.3f s%s",
                reason.value,
                len(seq.prompt),
                len(seq.generated),
                time.monotonic() - seq.arrival,
                f" ({error})" if error else "",
                extra={"request_id": seq.key or None},
            )

    def _emit(
        self, seq: Sequence, tokens: list[int], logprobs: list[float], finished: bool, reason: FinishReason | None
    ) -> None:
        """Hand tokens to the request's callback. A callback that fails (its client is gone, the
        response cannot be sent) only ends that request, never the batch or the engine thread."""
        try:
            seq.on_output(seq, tokens, logprobs, finished, reason)
        except Exception as e:
            seq.broken = True  # freed at the next step (no need to wait for a cancellation poll)
            self.throttle.exception(
                log,
                e,
                "sending a response failed; the request is dropped",
                level=logging.WARNING,
                request_id=seq.key or None,
            )

    def _release(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        if seq.slot >= 0:
            with self._cv:
                heapq.heappush(self.free_slots, seq.slot)
            seq.slot = -1

    def _drop_cancelled(self) -> None:
        """Free the slots of requests whose client went away, that a `stop` named, or whose time is
        up. A started engine's poller thread has asked is_cancelled() (client_gone); driven inline,
        it is asked here, at most every cancel_poll_s and never under the lock (each call is an IPC
        round trip in the Python backend, and submit() waits for the lock)."""
        now = time.monotonic()
        poll = self._poller is None and now - self._last_cancel_poll >= self.cancel_poll_s
        if poll:
            self._last_cancel_poll = now
        with self._cv:
            keys, self._stop_keys = self._stop_keys, set()
            candidates = list(self.waiting)

        def reason(s: Sequence) -> FinishReason | None:
            if s.broken or s.client_gone or (s.key and s.key in keys) or (poll and s.is_cancelled()):
                return FinishReason.CANCELLED
            return FinishReason.TIMEOUT if now > s.deadline else None

        dropped = [(s, r) for s in candidates if (r := reason(s))]
        if dropped:
            with self._cv:
                gone = {id(s) for s, _ in dropped}
                self.waiting = deque(s for s in self.waiting if id(s) not in gone)
        dropped += [(s, r) for s in list(self.running) if (r := reason(s))]
        for seq, why in dropped:
            if why is FinishReason.CANCELLED:
                self.stats.cancelled += 1
            else:
                self.stats.timed_out += 1
            seq.keep = seq.emitted  # nothing more goes out; the slot is free for the next request
            self._finish(seq, why)

    def _update_stats(self) -> None:
        st = self.stats
        st.running, st.waiting = len(self.running), len(self.waiting)
        st.kv_cache_used_tokens = sum(len(s.prompt) + len(s.generated) for s in self.running)
