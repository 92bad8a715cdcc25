"""Shared by the fuzz tests: classify every answer, keep counts, watch readiness, and send valid
requests alongside the fuzz so a fuzz case that wedges the server shows up as a failed valid request.

Categories (printed at the end of each test):
  ok                      a valid answer (HTTP 200 with text_output / gRPC result with text_output)
  invalid_ours            HTTP 400 / INVALID_ARGUMENT raised by our validation ("<field>: <problem>")
  invalid_triton          HTTP 400 / INVALID_ARGUMENT from Triton's own input checks (shape, dtype,
                          batch size, missing input, bad parameters)
  client_error_other      another 4xx / documented client-error gRPC code (e.g. 413)
  triton_frontend_500     HTTP 500 from Triton's HTTP frontend for JSON it cannot parse or convert
                          (upstream PR #8773): known upstream, the message is asserted
  stream_on_generate      HTTP 200 with Triton's "generate expects model to produce exactly 1 response"
                          for "stream": true sent to the non-streaming generate endpoint: upstream
                          behaviour, counted only when the request asked to stream
  server_error_ours       any other 5xx / INTERNAL: a bug in OUR code -> test failure
  timeout                 no answer within the client timeout -> test failure
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

# Messages Triton 2.51's HTTP frontend (http_server.cc) answers with HTTP 500 before any model
# runs. Only these count as "known upstream"; any other 500 fails the test.
TRITON_FRONTEND_500 = [
    re.compile(p)
    for p in (
        r"^failed to parse the request JSON buffer: ",
        r"^Unable to parse 'data': attempt to access JSON ",
        r"^Unable to parse JSON bytes array: ",
        r"^attempt to get members for non-object",
        r"^Expected JSON object for keyword: '\w+'",
        r"^Unable to parse 'data'",
        r"^Converting keyword: '[^']*': ",
    )
]
# Our validation errors as they come out of the ensemble: "in ensemble 'ensemble', <field>: ..."
OURS = re.compile(r"(?:in ensemble '[\w]+', )?(?:invalid )?([a-z_]+): (.+)", re.S)
FIELDS = {
    "text_input",
    "max_tokens",
    "stop_words",
    "bad_words",
    "stream",
    "exclude_input_in_output",
    "return_log_probs",
    "apply_chat_template",
    "end_id",
    "pad_id",
    "top_k",
    "min_tokens",
    "beam_width",
    "temperature",
    "top_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    # the token-level edge (tensorrt_llm and its unary twin)
    "input_ids",
    "input_lengths",
    "request_output_len",
    "runtime_top_k",
    "runtime_top_p",
    "streaming",
    "stop_words_list",
    "bad_words_list",
    "stop",
}
TRITON_400 = [
    re.compile(p)
    for p in (
        # Triton core input checks (shape, batch size, missing/unknown input, dtype), possibly relayed by
        # the ensemble ("in ensemble 'ensemble', [request id: 105] ...").
        r"^(in ensemble '[^']*', )?\[request id: [^\]]*\] ",
        r"request has 0 inputs",  # a request with no inputs at all (every ensemble input is optional)
        # The same core checks as they arrive on a gRPC stream (no request-id prefix there).
        r"^unexpected inference input '",
        r"^expected number of inputs between",
        r"^unexpected shape for input",
        r"^inference input '[^']*' data-type is",
        r"^input '[^']*' batch size does not match",
        r"^unexpected explicit tensor data for input",
        r"^input byte size mismatch",
        r"^inference request batch-size must be",
        r"^unable to find string length",
        r"^expected \d+ string elements",
        r"^element byte size indicates",
        r"^unexpected number of string elements",
        r"^input '[^']*' has no shape",
        r"incomplete string data for inference input",
        r"^Converting keyword: ",
        r"unexpected (datatype|shape)",
        r"^Request for unknown model",
    )
]


FAILURES = ("server_error_ours", "timeout", "bad_answer", "error_under_200", "not_ready")


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, category: str, case=None, detail: str = "") -> None:
        with self.lock:
            self.counts[category] += 1
            if category in FAILURES:
                self.failures.append((category, _short(case), detail[:500]))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self, title: str) -> str:
        lines = [f"{title}: {self.total} cases"] + [f"  {k:22s} {v}" for k, v in sorted(self.counts.items())]
        seen = set()
        for f in self.failures:
            if f not in seen and len(seen) < 15:
                seen.add(f)
                lines.append(f"  FAIL {f}")
        return "\n".join(lines)


def _short(case, n: int = 300) -> str:
    s = case if isinstance(case, str) else repr(case)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def classify_http(status: int, body: bytes | str) -> tuple[str, str]:
    """(category, message) for one HTTP generate answer."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    msg = ""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            msg = str(doc.get("error", ""))
    except ValueError:
        doc, msg = None, text
    if status == 200:
        if isinstance(doc, dict) and isinstance(doc.get("text_output"), str) and "error" not in doc:
            return "ok", ""
        # e.g. Triton 2.51 answers a request missing a required ensemble input (when the input
        # count is still in range) with HTTP 200 {"error": "generate expects model to produce
        # exactly 1 response ..."}: the client is told "success" with no text.
        return "error_under_200", f"200 without text_output: {text[:300]}"
    return classify_error(status, msg)


# A Python exception escaping a model's execute(): the stub reports it as an error response (HTTP 400
# in Triton 2.51!) with the traceback. That is a crash in OUR code, whatever the status says.
CRASH = re.compile(r"Failed to process the request\(s\) for model|Traceback \(most recent call last\)|\nAt:\n")


def classify_error(status: int, msg: str) -> tuple[str, str]:
    """status: an HTTP status (400/500/...); gRPC callers map their code onto one."""
    if CRASH.search(msg):
        return "server_error_ours", f"{status} (model crashed): {msg}"
    if status == 400:
        m = OURS.match(msg)
        if m and m.group(1) in FIELDS and not msg.startswith("["):
            return "invalid_ours", msg
        if any(p.search(msg) for p in TRITON_400):
            return "invalid_triton", msg
        return "invalid_other", msg  # still a clean 400; listed so new messages get noticed
    if 400 < status < 500:
        return "client_error_other", msg
    if status == 500 and any(p.search(msg) for p in TRITON_FRONTEND_500):
        return "triton_frontend_500", msg
    return "server_error_ours", f"{status}: {msg}"


def is_ready(http: str, timeout: float = 5.0) -> bool:
    try:
        return requests.get(f"http://{http}/v2/health/ready", timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


VALID = {"text_input": "Say hi", "max_tokens": 2}


class Alongside:
    """Sends a valid request every `period_s` while the fuzz runs; every one must succeed."""

    def __init__(self, http: str, period_s: float = 0.5, timeout_s: float = 30):
        self.http, self.period_s, self.timeout_s = http, period_s, timeout_s
        self.ok, self.errors = 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        s = requests.Session()
        while not self._stop.wait(self.period_s):
            try:
                r = s.post(f"http://{self.http}/v2/models/ensemble/generate", json=VALID, timeout=self.timeout_s)
                if r.status_code == 200 and "text_output" in r.json():
                    self.ok += 1
                else:
                    self.errors.append(f"{r.status_code} {r.text[:200]}")
            except requests.RequestException as e:
                self.errors.append(f"{type(e).__name__}: {e}")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 5)


def server_log_tail(log_path, since: int = 0, n: int = 4000) -> str:
    """New server-log text since byte offset `since` (tracebacks from the Python stubs land there)."""
    if not log_path:
        return ""
    try:
        with open(log_path, "rb") as f:
            f.seek(since)
            return f.read()[-n:].decode("utf-8", "replace")
    except OSError:
        return ""


def log_size(log_path) -> int:
    try:
        import os

        return os.path.getsize(log_path) if log_path else 0
    except OSError:
        return 0


def wait_ready(http: str, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_ready(http):
            return True
        time.sleep(0.2)
    return False
