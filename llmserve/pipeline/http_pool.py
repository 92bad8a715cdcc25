"""Keep-alive HTTP connections to one server, for threads that each hold one while they read a stream;
a connection idle for `idle_close_s` is closed by a reaper thread.

Why the reaper: on SIGTERM tritonserver 2.51 first waits, up to its whole exit timeout, until no HTTP
connection is left open (src/http_server.cc, `HTTPServer::Stop`), and only then unloads its models. The
relay's idle keep-alive connections to its own server would hold every shutdown for the whole timeout, after
which the server exits without unloading. Under load a connection is reused within milliseconds, so closing it
after half a second idle costs a new connection only after a lull."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable

IDLE_CLOSE_S = 0.5


class ConnectionPool:
    def __init__(self, address: Callable[[], str], idle_close_s: float = IDLE_CLOSE_S, clock=time.monotonic):
        """address: host:port, asked at the first connection (the endpoint opens once every model is loaded)."""
        self._address_of, self._address = address, None
        self.idle_close_s, self._clock = idle_close_s, clock
        self._lock = threading.Lock()
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []  # the most recently given back last
        self._reaper: threading.Thread | None = None

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection and whether it was pooled (one the server may have closed meanwhile)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()[0], True
        return self.new(), False

    def new(self) -> http.client.HTTPConnection:
        with self._lock:
            self._address = self._address or self._address_of()
        host, port = self._address.rsplit(":", 1)
        return http.client.HTTPConnection(host.strip("[]"), int(port))

    def give_back(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse | None) -> None:
        """Pooled once its response was read to the end on a connection that stays open; closed otherwise."""
        if response is None or not response.isclosed() or response.will_close:
            conn.close()
            return
        with self._lock:
            self._idle.append((conn, self._clock()))
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="http-pool-reaper", daemon=True)
                self._reaper.start()

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close_idle(self, older_than: float = 0.0) -> int:
        """Closes the connections idle for `older_than` seconds or more; returns how many."""
        now = self._clock()
        with self._lock:
            old = [c for c, since in self._idle if now - since >= older_than]
            self._idle = [(c, since) for c, since in self._idle if now - since < older_than]
        for conn in old:
            conn.close()
        return len(old)

    def _reap(self) -> None:
        while True:
            time.sleep(self.idle_close_s / 2)
            self.close_idle(self.idle_close_s)
