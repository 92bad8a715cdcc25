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

import sys

RESTRICTED_APIS = ("model-repository", "logging", "trace", "shared-memory", "statistics", "model-config")
ADMIN_HEADER = "llmserve-admin-key"
ADMIN_KEY_ENV = "LLMSERVE_ADMIN_KEY"  # the key, when an operator needs the admin APIs


def restricted_flags(key: str) -> list[str]:
    apis = ",".join(RESTRICTED_APIS)
    return [f"--http-restricted-api={apis}:{ADMIN_HEADER}={key}",
            f"--grpc-restricted-protocol={apis}:{ADMIN_HEADER}={key}"]


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "flags":
        print("\n".join(restricted_flags(args[1])))
        return 0
    if args == ["header"]:
        print(ADMIN_HEADER)
        return 0
    print("usage: python -m llmserve.deploy.security flags KEY | header", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
