"""Logging for every llmserve process: one logger per module (`logging.getLogger(__name__)`, all under
`llmserve`), and the one place that decides where records go and how they look.

- Processes we start (the OpenAI frontend, the CLIs) call `configure(level, json=...)` once: one
  handler on the root logger (so uvicorn's and the libraries' records look the same), on stderr.
  Text for people; `json` (spec `logging.format: json`, or `--log-format json`) writes one JSON object
  per line (`time`, `level`, `logger`, `message`, `request_id`, `exc_info`, plus the record's extra
  fields) for log shippers.
- Inside tritonserver (Python models) the adapters call `to_triton(pb_utils)`: the `llmserve` logger
  then forwards to Triton's own logger (`pb_utils.Logger`), so our lines land in tritonserver's log,
  with its timestamps and its verbosity: DEBUG -> log_verbose (shown with `--log-verbose=1`, or after
  Triton's logging API turned verbose on), INFO -> log_info, WARNING -> log_warn, ERROR -> log_error.
  The package never imports triton_python_backend_utils; the adapter passes it in.
- A request id follows a request: `request_context(id)` sets it for the code that runs inside (a
  contextvar, so it follows asyncio tasks), code without that context (the engine thread) passes
  `extra={"request_id": ...}`; `RequestIdFilter` puts `request_id` on every record either way.
- `Throttle`: at most one full traceback per interval per distinct error, with a count of the ones
  left out (an engine step that fails on every step must not flood the log)."""

from __future__ import annotations

import contextlib
import contextvars
import json as _json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone

ROOT_LOGGER = "llmserve"
LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("llmserve_request_id", default=None)

# Attributes every LogRecord has; anything else on a record came from `extra=` and is a field of its own.
# (uvicorn adds `color_message`, its message with terminal colours: not a field.)
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "request_id",
    "color_message",
}


# --- the request id -----------------------------------------------------------------------------------
def current_request_id() -> str | None:
    return _request_id.get()


@contextlib.contextmanager
def request_context(request_id: str | None) -> Iterator[None]:
    """Every record logged inside (this task and the tasks it starts) carries this request id."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Puts `request_id` on every record: the one passed with `extra=`, else the context's, else None.
    Installed on handlers (not loggers), so records of every logger get it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = _request_id.get()
        return True


# --- formats ------------------------------------------------------------------------------------------
def _body(record: logging.LogRecord, formatter: logging.Formatter) -> str:
    """`[request id] message`, then the traceback if there is one."""
    rid = getattr(record, "request_id", None)
    text = record.getMessage()
    if rid:
        text = f"[{rid}] {text}"
    if record.exc_info:
        text += "\n" + formatter.formatException(record.exc_info)
    elif record.exc_text:
        text += "\n" + record.exc_text
    if record.stack_info:
        text += "\n" + formatter.formatStack(record.stack_info)
    return text


class TextFormatter(logging.Formatter):
    """`2026-12-02T05:41:53.123Z INFO llmserve.openai_api.app [req-1] message`: UTC, like the JSON."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{_utc(record.created)} {record.levelname} {record.name} {_body(record, self)}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id, exc_info
    (the formatted traceback or null), and any field passed with `extra=` (e.g. the access line's
    method, path, status, duration_ms) that JSON can carry."""

    def format(self, record: logging.LogRecord) -> str:
        exc = None
        if record.exc_info:
            exc = self.formatException(record.exc_info)
        elif record.exc_text:
            exc = record.exc_text
        doc = {
            "time": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "exc_info": exc,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in doc:
                doc[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        return _json.dumps(doc, ensure_ascii=False)


def _utc(created: float) -> str:
    return datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --- processes we start -------------------------------------------------------------------------------
class _OwnHandler(logging.StreamHandler):
    """The handler configure() installs (and replaces when called again)."""


def configure(level: str | int = "info", json: bool = False, stream=None) -> logging.Handler:
    """Send every record (ours, uvicorn's, libraries') at `level` or above to `stream` (stderr), as
    text or as JSON lines. For processes we start; never called by library code or inside Triton."""
    if isinstance(level, str):
        if level.lower() not in LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
        level = getattr(logging, level.upper())
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _OwnHandler)]:
        root.removeHandler(h)
    handler = _OwnHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    handler.addFilter(RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    return handler


def add_cli_options(parser, *, level: str | None = None) -> None:
    """--log-level and --log-format for a CLI (defaults: the spec's `logging:` section, see from_args)."""
    parser.add_argument(
        "--log-level", choices=LEVELS, default=level, help="default: the spec's logging.level, else info"
    )
    parser.add_argument(
        "--log-format", choices=FORMATS, default=None, help="default: the spec's logging.format, else text"
    )


def configure_from_args(args, spec=None) -> logging.Handler:
    """configure() from add_cli_options' flags, falling back on the spec's `logging:` section."""
    section = getattr(spec, "logging", None)
    level = args.log_level or (section.level if section else "info")
    fmt = args.log_format or (section.format if section else "text")
    return configure(level, json=fmt == "json")


# --- inside tritonserver ------------------------------------------------------------------------------
class TritonHandler(logging.Handler):
    """Forwards records to Triton's logger (`pb_utils.Logger`), which adds its own time, level and
    source location; the line says `[logger] [request id] message` and the traceback."""

    def __init__(self, triton_logger):
        super().__init__(logging.DEBUG)
        self.triton = triton_logger
        self.addFilter(RequestIdFilter())
        self.setFormatter(logging.Formatter())  # for its formatException

    def format(self, record: logging.LogRecord) -> str:
        return f"[{record.name}] {_body(record, self.formatter)}"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            t = self.triton
            if record.levelno >= logging.ERROR:
                t.log_error(text)
            elif record.levelno >= logging.WARNING:
                t.log_warn(text)
            elif record.levelno >= logging.INFO:
                t.log_info(text)
            else:
                t.log_verbose(text)
        except Exception:
            self.handleError(record)


def to_triton(pb) -> TritonHandler:
    """Inside a Python model: the `llmserve` logger (every module of the package) goes to Triton's log
    and only there (not also to the stub's stderr). Every level is forwarded: Triton decides what it
    shows (DEBUG records are verbose lines). Idempotent; call it first thing in initialize()."""
    logger = logging.getLogger(ROOT_LOGGER)
    for h in [h for h in logger.handlers if isinstance(h, TritonHandler)]:
        logger.removeHandler(h)
    handler = TritonHandler(pb.Logger)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return handler


# --- rate limit ---------------------------------------------------------------------------------------
def error_key(e: BaseException) -> str:
    """What makes two failures 'the same error': the exception type and where it was raised (not the
    message, which often carries numbers that change every time)."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__qualname__}@{where}"


class Throttle:
    """At most one full report per `interval_s` per key. `allow(key)` returns None when this one is left
    out (it is counted), else how many were left out since the last report of that key."""

    def __init__(self, interval_s: float = 60.0, clock=time.monotonic, max_keys: int = 1000):
        self.interval_s, self.clock, self.max_keys = interval_s, clock, max_keys
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> int | None:
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return None
            if last is None and len(self._last) >= self.max_keys:  # bounded: forget the oldest
                oldest = min(self._last, key=self._last.get)
                self._last.pop(oldest), self._suppressed.pop(oldest, None)
            self._last[key] = now
            return self._suppressed.pop(key, 0)

    def exception(
        self,
        logger: logging.Logger,
        e: BaseException,
        message: str,
        *args,
        level: int = logging.ERROR,
        request_id: str | None = None,
    ) -> bool:
        """Log `message` with e's traceback, unless the same error was reported less than interval_s
        ago (then only count it). True if logged."""
        left_out = self.allow(error_key(e))
        if left_out is None:
            return False
        if left_out:
            message += f" ({left_out} more like it in the last {self.interval_s:g} s not shown)"
        logger.log(level, message, *args, exc_info=(type(e), e, e.__traceback__), extra={"request_id": request_id})
        return True
