"""Security defaults, in one place, read by every launcher: deploy/tritonserver.py (serve.sh, the
cluster replicas, the tests), deploy/haproxy.py and docker/launch.sh
(`python3 -m llmserve.deploy.security flags KEY` prints the tritonserver flags).

Triton's APIs beyond inference, metadata and health answer only requests that carry ADMIN_HEADER
with the server's admin key: model control, logging and tracing, shared-memory registration (the
Python-backend attack surface behind NVIDIA's 2025 Triton advisories), statistics and model
configuration. Clients that read a model's configuration (perf_analyzer, genai-perf) pass the
header (`-H llmserve-admin-key:<key>`). The load balancer strips the header and refuses those paths
whatever the client sends."""

from __future__ import annotations

import os
import sys
import time

RESTRICTED_APIS = ("model-repository", "logging", "trace", "shared-memory", "statistics", "model-config")
ADMIN_HEADER = "llmserve-admin-key"
ADMIN_KEY_ENV = "LLMSERVE_ADMIN_KEY"  # the key, when an operator needs the admin APIs


def restricted_flags(key: str) -> list[str]:
    apis = ",".join(RESTRICTED_APIS)
    return [
        f"--http-restricted-api={apis}:{ADMIN_HEADER}={key}",
        f"--grpc-restricted-protocol={apis}:{ADMIN_HEADER}={key}",
    ]


def scrub_argv(pid: int, secret: str, timeout_s: float = 30.0) -> bool:
    """Overwrite `secret` in a child's command line once the child has parsed it, so `ps` and
    /proc/<pid>/cmdline no longer show it. tritonserver takes its restricted-API key only on the
    command line; it copies its arguments into its settings before it starts any thread, so a
    second thread means the parsing is over and the original argv memory is no longer read.
    Needs the right to write the child's memory (same user, the default ptrace policy). The key is
    visible for the few milliseconds before; returns False if it could not be scrubbed."""
    deadline = time.monotonic() + timeout_s
    try:
        while len(os.listdir(f"/proc/{pid}/task")) < 2:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (stat fields 48 and 49)
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            args = mem.read(end - start)
            needle = secret.encode()
            if needle not in args:
                return True
            mem.seek(start)
            mem.write(args.replace(needle, b"*" * len(needle)))
        return True
    except OSError:
        return False


def main(argv=None) -> int:
    """flags: the tritonserver flags for the key in $LLMSERVE_ADMIN_KEY (an environment variable,
    not an argument: arguments are visible to every local user). scrub PID: wait until that
    process (the launcher's pid, which `exec tritonserver` keeps) has parsed its command line, then
    mask the key there (docker/launch.sh starts this in the background just before its exec)."""
    args = list(sys.argv[1:] if argv is None else argv)
    key = os.environ.get(ADMIN_KEY_ENV, "")
    if args == ["flags"] and key:
        print("\n".join(restricted_flags(key)))
        return 0
    if len(args) == 2 and args[0] == "scrub" and args[1].isdigit() and key:
        return 0 if scrub_argv(int(args[1]), key, timeout_s=10) else 1
    if args == ["header"]:
        print(ADMIN_HEADER)
        return 0
    print(f"usage: {ADMIN_KEY_ENV}=KEY python -m llmserve.deploy.security flags | scrub PID | header", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
