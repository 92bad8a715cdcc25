"""The frontend's own listening socket (llmserve/openai_api/listen.py): the connections it accepts run
without Nagle's algorithm, or each stream's first chunk waits for the client's delayed ACK (40 ms)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from llmserve.deploy.tritonserver import free_ports
from llmserve.openai_api import workers
from llmserve.openai_api.listen import listen_socket


def accepted_nodelay(sock: socket.socket) -> int:
    """TCP_NODELAY of a connection an asyncio server (as uvicorn runs) accepted from `sock`."""

    async def main() -> int:
        got = asyncio.get_running_loop().create_future()

        async def on_client(_reader, writer):
            got.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_client, sock=sock)
        async with server:
            _, w = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(got, 10)
            w.close()
            return value

    return asyncio.run(main())


@pytest.mark.parametrize("reuse_port", [False, True])
def test_accepted_connections_run_without_nagle(reuse_port):
    sock = listen_socket("127.0.0.1", free_ports(1)[0], reuse_port=reuse_port)
    assert sock.proto == socket.IPPROTO_TCP
    assert accepted_nodelay(sock) == 1


def test_workers_listen_on_such_a_socket(monkeypatch, tmp_path):
    """workers.run hands the supervisor a socket whose connections get TCP_NODELAY (uvicorn's own
    Config.bind_socket makes proto 0, and asyncio then leaves Nagle on)."""
    seen = []
    monkeypatch.setattr(workers.Supervisor, "run", lambda self: seen.extend(s.dup() for s in self.sockets))
    monkeypatch.setenv(workers.METRICS_ENV, str(tmp_path / "metrics"))
    for name in (workers.IDS_ENV, workers.ARGS_ENV):  # run() sets them: restored (to unset) after the test
        monkeypatch.setenv(name, "")
    port = free_ports(1)[0]
    assert workers.run({}, 2, host="127.0.0.1", port=port) == 0
    (sock,) = seen  # a duplicate: run() closes its own on the way out
    assert sock.getsockname()[1] == port
    assert accepted_nodelay(sock) == 1


def test_a_taken_port_is_named():
    taken = listen_socket("127.0.0.1", free_ports(1)[0])
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            listen_socket("127.0.0.1", port)
    finally:
        taken.close()
