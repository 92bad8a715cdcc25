#!/usr/bin/env bash
# perf_analyzer against the ensemble over gRPC streaming, with --input-data JSON of synthetic prompts of
# exactly INPUT_LEN tokens and exact OUTPUT_LEN outputs (min_tokens = max_tokens).
#
#   URL=localhost:8001 CONCURRENCY=1,8,32 INPUT_LEN=128 OUTPUT_LEN=128 scripts/perf_analyzer.sh [OUT_DIR]
#
# Env: URL, MODEL (ensemble), CONCURRENCY (comma list), INPUT_LEN, OUTPUT_LEN, CHECKPOINT (its tokenizer
# sizes the prompts), MEASUREMENT_MS (per window), PERF_ANALYZER (binary), PYTHON.
# perf_analyzer reports requests/s and request latency (first request to final response), not TTFT/ITL:
# output tokens/s = requests/s x OUTPUT_LEN. tools/bench.py reports TTFT and ITL.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-results/perf_analyzer}
URL=${URL:-localhost:8001}
MODEL=${MODEL:-ensemble}
CONCURRENCY=${CONCURRENCY:-1,8,32,64,128}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
CHECKPOINT=${CHECKPOINT:-build/checkpoints/smollm2-135m-instruct}
MEASUREMENT_MS=${MEASUREMENT_MS:-5000}
PYTHON=${PYTHON:-python3}

# perf_analyzer (PyPI perf-analyzer 2.60) is built against glibc 2.38: Ubuntu 24.04 or the NGC SDK image.
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$glibc" ] && [ "$(printf '%s\n2.38\n' "$glibc" | sort -V | head -1)" != "2.38" ]; then
  echo "perf_analyzer needs glibc >= 2.38; this machine has glibc $glibc (e.g. Debian 12)." >&2
  echo "Use the pure-Python load generator instead, which also reports TTFT and ITL:" >&2
  echo "  python tools/bench.py --url $URL --concurrency $CONCURRENCY --input-len $INPUT_LEN --output-len $OUTPUT_LEN --duration 20 --out results/bench" >&2
  echo "or run this script in the nvcr.io/nvidia/tritonserver:<yy.mm>-py3-sdk image." >&2
  exit 2
fi
PA=${PERF_ANALYZER:-$(command -v perf_analyzer || true)}
if [ -z "$PA" ]; then
  PA=$($PYTHON -c 'import os, perf_analyzer; print(os.path.join(os.path.dirname(perf_analyzer.__file__), "bin", "perf_analyzer"))' 2>/dev/null || true)
fi
[ -x "$PA" ] || { echo "perf_analyzer not found: pip install perf-analyzer==2.60.0 (or set PERF_ANALYZER)" >&2; exit 2; }

mkdir -p "$OUT_DIR"
DATA="$OUT_DIR/input_data.json"
$PYTHON - "$CHECKPOINT" "$INPUT_LEN" "$OUTPUT_LEN" "$DATA" <<'PY'
import json, sys
from llmserve.bench.workload import make_prompts
ckpt, n_in, n_out, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [{"text_input": [p.text], "max_tokens": [n_out], "min_tokens": [n_out], "stream": [True],
         "apply_chat_template": [False]} for p in make_prompts(ckpt, 64, n_in)]
json.dump({"data": rows}, open(path, "w"))
PY

for c in ${CONCURRENCY//,/ }; do
  echo "== perf_analyzer concurrency $c"
  # model-config is a restricted API (llmserve/deploy/security.py): perf_analyzer reads it with the key
  # (over gRPC Triton 2.51 expects the header as triton-grpc-protocol-<name>, seen on the H200).
  "$PA" -m "$MODEL" -i grpc --streaming --async -u "$URL" --input-data "$DATA" \
    ${LLMSERVE_ADMIN_KEY:+-H "llmserve-admin-key:$LLMSERVE_ADMIN_KEY"} \
    ${LLMSERVE_ADMIN_KEY:+-H "triton-grpc-protocol-llmserve-admin-key:$LLMSERVE_ADMIN_KEY"} \
    --shape text_input:1 --shape max_tokens:1 --shape min_tokens:1 --shape stream:1 --shape apply_chat_template:1 \
    --concurrency-range "$c" --measurement-interval "$MEASUREMENT_MS" --stability-percentage 999 --max-trials 3 \
    -f "$OUT_DIR/pa_c$c.csv" --profile-export-file "$OUT_DIR/pa_c$c.profile.json" 2>&1 | tee "$OUT_DIR/pa_c$c.log"
done
$PYTHON - "$OUT_DIR" "$OUTPUT_LEN" "$CONCURRENCY" <<'PY'
import csv, json, sys
out, n_out, conc = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
summary = []
for c in conc:
    try:
        row = next(csv.DictReader(open(f"{out}/pa_c{c}.csv")))
    except (OSError, StopIteration):
        continue
    ips = float(row["Inferences/Second"])
    summary.append({"concurrency": int(c), "requests_per_s": ips, "output_tokens_per_s": round(ips * n_out, 1),
                    "latency_p50_ms": float(row.get("p50 latency", 0)) / 1000,
                    "latency_p99_ms": float(row.get("p99 latency", 0)) / 1000})
    print(summary[-1])
json.dump(summary, open(f"{out}/perf_analyzer_summary.json", "w"), indent=2)
PY
