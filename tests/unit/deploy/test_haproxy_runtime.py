"""HAProxy's runtime API client and the rolling restart, against a fake admin socket (no HAProxy)."""

from __future__ import annotations

import socket
import threading

import pytest

from llmserve.client.aio import read_drained
from llmserve.deploy import haproxy_runtime
from llmserve.deploy.frontend import set_drained
from llmserve.deploy.haproxy_runtime import ClientDrain, RuntimeAPI, parse_stat, rolling_restart, state_command

STAT = """# pxname,svname,scur,status,stot
triton_http,FRONTEND,3,OPEN,10
triton_http,triton0,2,UP,7
triton_http,triton1,0,DRAIN,3
triton_http,BACKEND,2,UP,10
triton_grpc,triton0,1,UP,4
triton_grpc,triton1,,UP,0
"""


def test_state_command_targets_the_http_backend():
    assert state_command("triton1", "drain") == "set server triton_http/triton1 state drain"
    assert state_command("triton0", "maint", backend="triton_grpc") == "set server triton_grpc/triton0 state maint"


def test_state_command_refuses_an_unknown_state():
    with pytest.raises(ValueError, match="ready, drain, maint"):
        state_command("triton0", "down")


def test_parse_stat_keeps_servers_only():
    rows = parse_stat(STAT)
    assert set(rows) == {
        ("triton_http", "triton0"),
        ("triton_http", "triton1"),
        ("triton_grpc", "triton0"),
        ("triton_grpc", "triton1"),
    }
    assert rows[("triton_http", "triton1")]["status"] == "DRAIN"
    assert parse_stat("") == {}


class FakeSocket:
    """A UNIX socket that answers each connection's one command from `answers` and records it."""

    def __init__(self, path, answers):
        self.path, self.answers, self.lines = str(path), answers, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    data += conn.recv(4096)
                line = data.decode().strip()
                self.lines.append(line)
                conn.sendall(self.answers(line).encode())

    def close(self):
        self.sock.close()


@pytest.fixture
def fake(tmp_path):
    holder = {}

    def make(answers):
        holder["f"] = FakeSocket(tmp_path / "haproxy.sock", answers)
        return holder["f"]

    yield make
    if "f" in holder:
        holder["f"].close()


def test_runtime_api_sends_one_line_per_connection_and_reads_the_answer(fake):
    f = fake(lambda line: STAT if line == "show stat" else "")
    api = RuntimeAPI(f.path)
    assert api.sessions("triton0") == 3  # both backends
    assert api.sessions("triton1") == 0  # an empty scur counts as 0
    assert api.status("triton1") == "DRAIN"
    api.set_state("triton1", "ready")
    assert f.lines == ["show stat", "show stat", "show stat", "set server triton_http/triton1 state ready"]


def test_set_state_raises_on_any_answer(fake):
    f = fake(lambda line: "No such server.\n")
    with pytest.raises(RuntimeError, match="No such server"):
        RuntimeAPI(f.path).set_state("triton9", "drain")


class FakeAPI:
    def __init__(self):
        self.calls = []

    def set_state(self, name, state):
        self.calls.append((name, state))

    def sessions(self, name):
        return 0

    def wait_status(self, name, want="UP", timeout_s=60):
        self.calls.append((name, want))
        return 0.0


def test_rolling_restart_drains_restarts_and_readies_one_server_at_a_time():
    api = FakeAPI()
    restarted = []

    def restart(name):
        api.calls.append((name, "restart"))
        restarted.append(name)

    report = rolling_restart(api, ["triton0", "triton1"], restart, drain_timeout_s=5)
    assert api.calls == [
        ("triton0", "drain"),
        ("triton0", "maint"),
        ("triton0", "restart"),
        ("triton0", "ready"),
        ("triton0", "UP"),
        ("triton1", "drain"),
        ("triton1", "maint"),
        ("triton1", "restart"),
        ("triton1", "ready"),
        ("triton1", "UP"),
    ]
    assert [r["server"] for r in report] == ["triton0", "triton1"] and all(r["left_sessions"] == 0 for r in report)


def test_direct_clients_are_drained_before_the_stop_and_undrained_after(monkeypatch):
    api = FakeAPI()
    monkeypatch.setattr(haproxy_runtime.time, "sleep", lambda s: None)
    now = [0.0]

    def clock():
        now[0] += 0.05
        return now[0]

    monkeypatch.setattr(haproxy_runtime.time, "monotonic", clock)

    def restart(name):
        api.calls.append((name, "restart", round(now[0], 2)))

    clients = ClientDrain(
        lambda n: api.calls.append((n, "clients drain")), lambda n: api.calls.append((n, "clients undrain")), 1.5
    )
    rolling_restart(api, ["triton0"], restart, drain_timeout_s=5, clients=clients)
    names = [c[1] for c in api.calls]
    assert names == ["drain", "clients drain", "maint", "restart", "clients undrain", "ready", "UP"]
    assert api.calls[3][2] >= 1.5  # stopped only once the clients had their settle time


def test_direct_clients_are_undrained_even_when_the_restart_fails():
    api = FakeAPI()
    clients = ClientDrain(lambda n: None, lambda n: api.calls.append((n, "clients undrain")), 0.0)

    def restart(name):
        raise TimeoutError("not ready")

    with pytest.raises(TimeoutError):
        rolling_restart(api, ["triton0"], restart, drain_timeout_s=5, clients=clients)
    assert api.calls[-1] == ("triton0", "clients undrain")


def test_the_drained_file_is_replaced_whole(tmp_path):
    path = tmp_path / "openai-drained.txt"
    set_drained(path, "127.0.0.1:18101", True)
    set_drained(path, "127.0.0.1:18100", True)
    set_drained(path, "127.0.0.1:18101", False)
    assert read_drained(path) == {"127.0.0.1:18100"} and path.read_text() == "127.0.0.1:18100\n"
    assert not list(tmp_path.glob("*.tmp"))
