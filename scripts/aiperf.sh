#!/usr/bin/env bash
# aiperf (PyPI, NVIDIA's benchmark for OpenAI-compatible servers) against the OpenAI frontend, from its
# own virtualenv build/aiperf-venv (requirements-aiperf.txt; its pins conflict with requirements.txt).
#   scripts/aiperf.sh [--url http://localhost:9000] [--concurrency 1] [--requests 40] [--isl 64 --osl 32] [--out DIR]
# Chat completions, streamed; the prompt tokenizer is the checkpoint's own (local files, no hub).
# ignore_eos makes every answer exactly --osl tokens long, as tools/bench.py's min_tokens = max_tokens does.
set -euo pipefail
cd "$(dirname "$0")/.."
URL=http://localhost:9000 CONC=1 N=40 ISL=64 OSL=32 OUT=results/aiperf SPEC=specs/default.yaml
while [[ $# -gt 0 ]]; do
  case $1 in
    --url) URL=$2; shift 2;; --concurrency) CONC=$2; shift 2;; --requests) N=$2; shift 2;;
    --isl) ISL=$2; shift 2;; --osl) OSL=$2; shift 2;; --out) OUT=$2; shift 2;; --spec) SPEC=$2; shift 2;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
V=build/aiperf-venv
want=$(sha256sum requirements-aiperf.txt | cut -d' ' -f1)
if [[ "$(cat $V/.installed 2>/dev/null)" != "$want" ]]; then
  echo "[aiperf] installing aiperf into $V (first run: a few minutes)"
  ${PYTHON:-python3} -m venv $V
  $V/bin/python -m pip install --disable-pip-version-check -q -r requirements-aiperf.txt
  echo "$want" > $V/.installed
fi
./scripts/setup.sh >/dev/null
read -r MODEL TOKENIZER < <(.venv/bin/python -c "
from llmserve.spec import load_spec; s = load_spec('$SPEC'); print(s.openai.served_model_name or s.name, s.checkpoint_path())")
# Not HF_HUB_OFFLINE: with it aiperf looks for the tokenizer in the hub cache only; a local path
# needs no network either way.
exec $V/bin/aiperf profile --model "$MODEL" --url "$URL" --endpoint-type chat --streaming \
  --tokenizer "$TOKENIZER" --concurrency "$CONC" --request-count "$N" --warmup-request-count "$CONC" \
  --isl "$ISL" --osl "$OSL" --extra-inputs ignore_eos:true --random-seed 0 \
  --artifact-dir "$OUT/c$CONC" --ui-type none
