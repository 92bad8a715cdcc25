#!/usr/bin/env bash
# Set up, build the default checkpoint if missing, and run tritonserver in the foreground.
#   ./scripts/serve.sh [--spec specs/default.yaml] [--http-port 8000 --grpc-port 8001 --metrics-port 8002]
#   ./scripts/serve.sh --replicas 3 [--spec ...]   N servers behind HAProxy on the standard ports
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ " $* " == *" --replicas "* || " $* " == *" --replicas="* ]]; then
  ./scripts/setup.sh --haproxy
  exec .venv/bin/python -m llmserve.deploy.cluster "$@"
fi
./scripts/setup.sh
exec .venv/bin/python -m llmserve.deploy.serve "$@"
