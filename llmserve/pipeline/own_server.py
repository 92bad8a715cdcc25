"""The address of the tritonserver a Python model runs in, read from that server's own command line (a
stub's parent process is tritonserver): the relay and the unary twins call their model through it, with
no configuration to get wrong."""

from __future__ import annotations

import os

# tritonserver's own defaults for --grpc-port and --http-port
DEFAULT_PORTS = {"grpc": 8001, "http": 8000}
_OFF = ("false", "0", "off", "no")


def server_address(cmdline: list[str], protocol: str = "grpc") -> str:
    """host:port of the endpoint (`protocol`: grpc or http) that tritonserver started with `cmdline`
    listens on."""
    opts: dict[str, str] = {}
    for i, arg in enumerate(cmdline):
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            opts[key] = value
        elif arg.startswith("--") and i + 1 < len(cmdline) and not cmdline[i + 1].startswith("--"):
            opts[arg] = cmdline[i + 1]
    if opts.get(f"--allow-{protocol}", "true").lower() in _OFF:
        raise RuntimeError(
            f"this model reaches its backend model over this server's {protocol} endpoint: "
            f"start tritonserver without --allow-{protocol}=false"
        )
    host = opts.get(f"--{protocol}-address", "0.0.0.0")
    host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    return f"{host}:{int(opts.get(f'--{protocol}-port', DEFAULT_PORTS[protocol]))}"


def own_server_address(protocol: str = "grpc") -> str:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        return server_address([a.decode() for a in f.read().split(b"\0") if a], protocol)
