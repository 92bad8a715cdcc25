"""The frontend's listening socket, when the frontend binds it itself (several workers on one port, or
--reuse-port) instead of leaving it to uvicorn's single-process server."""

from __future__ import annotations

import socket


def listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound TCP socket made with proto IPPROTO_TCP, not 0.

    asyncio turns Nagle's algorithm off (TCP_NODELAY) only on connections whose socket says IPPROTO_TCP
    (base_events._set_nodelay), and an accepted connection inherits its listener's proto. uvicorn's
    Config.bind_socket and socket.socket()'s defaults give proto 0, so every connection kept Nagle on:
    a stream's first chunk, written right after the response headers, waited for the client's delayed
    ACK (40 ms on Linux). With 2 workers on the 2-core CPU the client's TTFT p50 was 57 ms against the
    frontend's own 12 ms (one worker, whose socket asyncio makes itself: 14.5 ms); docs/PERFORMANCE.md."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as e:  # the port is taken, or the address is not this machine's: say which
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from e
    sock.set_inheritable(True)  # the spawned workers accept from it
    return sock
