"""How the mixed load's HTTP stream clients (llmserve/bench/mixed_load.py: plain_stream, hangup_http)
count each outcome, against a scripted SSE server on loopback (what the server sends is the test's)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from llmserve.bench.mixed_load import Counts, hangup_http, plain_stream

SCRIPT: dict = {}


class Scripted(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        status, events = SCRIPT["status"], SCRIPT["events"]
        self.send_response(status)
        self.send_header("content-type", "text/event-stream" if status == 200 else "application/json")
        self.end_headers()
        if status != 200:
            self.wfile.write(json.dumps({"error": events}).encode())
            return
        for e in events:
            self.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")
            self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{s.server_address[1]}"
    s.shutdown()


def run(server, client, status, events, *args) -> dict:
    SCRIPT.update(status=status, events=events)
    c = Counts()
    client(server, *args, c)
    return {k: v for k, v in c.as_dict().items() if v and k != "errors"} | {"errors": dict(c.errors)}


TOKEN = {"text_output": "a"}
PAIR = {"text_output": "ab", "output_log_probs": [0.0, 0.0]}  # two coalesced tokens


def test_plain_stream_outcomes(server):
    assert run(server, plain_stream, 200, [TOKEN, PAIR, TOKEN], 4) == {"ok": 1, "errors": {}}
    assert run(server, plain_stream, 200, [TOKEN, TOKEN], 4) == {"cut": 1, "errors": {"short stream 2/4": 1}}
    assert run(server, plain_stream, 200, [TOKEN, {"error": "boom"}], 4) == {
        "cut": 1,
        "errors": {"ConnectionError": 1},
    }
    got = run(server, plain_stream, 200, [{"error": "server busy: engine queue full"}], 4)
    assert got["retryable"] == 1 and "failed" not in got
    got = run(server, plain_stream, 400, "invalid max_tokens", 4)
    assert got["failed"] == 1 and list(got["errors"]) == ['400 {"error": "invalid max_tokens"}']


def test_hangup_http_outcomes(server):
    assert run(server, hangup_http, 200, [PAIR, TOKEN, TOKEN, TOKEN], 8, 3) == {
        "ok": 1,
        "errors": {},
    }  # events, not tokens
    assert run(server, hangup_http, 200, [TOKEN], 8, 3) == {
        "cut": 1,
        "errors": {"ended after 1 events, before the hang-up": 1},
    }
    assert run(server, hangup_http, 200, [TOKEN, {"error": "boom"}], 8, 3) == {
        "cut": 1,
        "errors": {"ConnectionError": 1},
    }
    got = run(server, hangup_http, 503, "no Triton server available", 8, 3)
    assert got["retryable"] == 1
