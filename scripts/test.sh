#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, check the committed repository, run pytest.
#   ./scripts/test.sh                  the whole suite, in two pytest runs: tests/unit (pure logic, no
#                                      server) spread over 2 processes (pytest-xdist), then the server
#                                      tests one at a time (they start servers and measure timings)
#   ./scripts/test.sh [pytest args]    one pytest run with these arguments, e.g. tests/unit -k detokenize
# Every run ends with its 20 slowest tests. How long the soak, chaos and fuzz tests run is in
# tests/durations.py (LLMSERVE_TEST_PROFILE=ci or full; .ci/run sets ci).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --haproxy
.venv/bin/python scripts/build_engine.py --spec specs/default.yaml
.venv/bin/python tools/generate.py --spec specs/default.yaml --check
# Lint and format (configured in pyproject.toml): a style slip fails CI in seconds, before any server starts.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The H200's stubs run Python 3.12 (ours 3.11): where a 3.12 interpreter exists, give the stub test
# its environment (numpy, tokenizers, tritonclient; seconds) so CI runs it instead of skipping it.
# (pyenv's shim answers `command -v` without a 3.12 selected: try each candidate for real.)
for py312 in $(command -v python3.12) /root/.pyenv/versions/3.12*/bin/python3.12; do
  if "$py312" -c pass 2>/dev/null; then ./scripts/stub_python.sh "$py312"; break; fi
done
pytest=(.venv/bin/python -m pytest -v --durations=20)
if (( $# )); then
  exec "${pytest[@]}" "$@"
fi
# Both runs always run (a unit failure does not hide the server tests' results); the exit status is
# the first failure's. The server tests run last, so the output ends with their summary line.
# LLMSERVE_UNIT_WORKERS=0 runs tests/unit in one process (on a machine already loaded by other work,
# 2 workers measured no faster than one: 183 s vs 185 s).
unit=0
"${pytest[@]}" -n "${LLMSERVE_UNIT_WORKERS:-2}" tests/unit || unit=$?
servers=0
"${pytest[@]}" tests --ignore=tests/unit || servers=$?
if (( unit )); then
  echo "tests/unit failed (pytest exit $unit): see the first run above" >&2
  exit "$unit"
fi
exit "$servers"
