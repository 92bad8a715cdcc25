#!/usr/bin/env bash
# The whole H200 benchmark, run ON the GPU machine from the repository root:
#   bash scripts/h200/run.sh [PHASES]      PHASES: comma list of c,d,b,a (default c,d,b,a)
# Needs build/h200/ carried along (prepared here by `bash scripts/h200/prepare.sh`): the trimmed
# nvidia-pytriton files, wheels (tritonclient, perf-analyzer, pydantic...), the SmolLM2 tokenizer
# and the model repository rendered from scripts/h200/bench-1b.yaml.
#   weights  random bf16 1.2B Llama built on the GPU (scripts/h200/make_weights.py)
#   c        tritonserver + tools/bench.py: C_TARGETS (engine in-process, ensemble over gRPC streaming, tensorrt_llm)
#   d        perf_analyzer on the ensemble (scripts/perf_analyzer.sh)
#   t        tensorrt_llm token-level over gRPC streaming, bounded by T_TIMEOUT, then stub thread dump
#   b        engine variants in-process: no end ids (--ignore-eos) at CONC_B; eager (no CUDA graphs) if EAGER=1
# c and d start tritonserver with /tmp/stubvenv/bin/python3 (numpy 1.26.4 for the Python stubs: stub_venv.sh)
# and check 2 requests each to ensemble and tensorrt_llm first; on failure they are skipped (log tail printed).
#   a        Hugging Face static generate: default cache at every batch, static cache at STATIC_BS
# Results go to build/h200/work and, packed, to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
PHASES=${1:-c,d,b,a}
OUT=${OUT:-build/h200/out}
mkdir -p "$OUT" build/h200/work
W=build/h200/work
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 LLMSERVE_USE_PYTRITON=1
CONC=${CONC:-1,8,32,64,128}
DUR=${DUR:-6}
STATIC_BS=${STATIC_BS:-64}
CKPT=build/checkpoints/bench-1b
SPEC=scripts/h200/bench-1b.yaml
stamp() { echo "[$(date +%T)] $*"; }

stamp "setup"
if [ ! -d /tmp/site/pytriton ]; then
  mkdir -p /tmp/site && tar -xJf build/h200/pytriton-trim.tar.xz -C /tmp/site &&
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site build/h200/whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
# Triton's Python stubs need numpy < 2 (see stub_venv.sh); everything else keeps the machine's numpy 2.
bash scripts/h200/stub_venv.sh python3 build/h200/stubwhl/numpy-1.26.4-cp312-*.whl /tmp/stubvenv || exit 1
chmod +x /tmp/site/perf_analyzer/bin/perf_analyzer 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c 'import sys, torch, transformers, platform; print(sys.version.split()[0], torch.__version__, transformers.__version__, platform.libc_ver())'
nproc; date -u
python3 -c 'import numpy; print("client numpy", numpy.__version__)'

stamp "weights"
python3 scripts/h200/make_weights.py build/h200/tokenizer "$CKPT" || exit 1

BENCH="python3 tools/bench.py --spec $SPEC --checkpoint $CKPT --input-len 128 --output-len 128 --no-progress"
ENGINE="--engine-device cuda --engine-dtype bfloat16 --engine-max-slots 128 --engine-max-seq-len 512"

if [[ ,$PHASES, == *,c,* || ,$PHASES, == *,d,* || ,$PHASES, == *,t,* ]]; then
  stamp "tritonserver"
  /tmp/stubvenv/bin/python3 scripts/h200/triton_up.py build/h200/model_repository 18000 18001 18002 "$W/tritonserver.log" || exit 1
  stamp "smoke: 2 requests to the ensemble"
  if ! timeout 90 $BENCH --url localhost:18001 --targets ensemble --concurrency 1 --requests 2 --warmup 0 \
      --request-timeout 30 --out $W/smoke; then
    echo "SMOKE FAILED: skipping c and d"; tail -n 60 $W/tritonserver.log
    PHASES=${PHASES//c/-}; PHASES=${PHASES//d/-}; PHASES=${PHASES//t/-}
  fi
fi
if [[ ,$PHASES, == *,c,* ]]; then
  stamp "(b)+(c): engine in-process, ensemble over gRPC streaming, tensorrt_llm token-level"
  timeout ${C_TIMEOUT:-300} $BENCH --url localhost:18001 --targets ${C_TARGETS:-engine,ensemble,tensorrt_llm} $ENGINE \
    --concurrency ${CONC_C:-$CONC} --duration ${DUR_C:-$DUR} --request-timeout ${RT:-60} \
    --label "H200 bench-1b: engine CUDA graphs vs Triton" --out $W/c
  echo "--- tritonserver.log (tail)"; tail -n 40 $W/tritonserver.log
  curl -s localhost:18002/metrics | grep -E "^nv_inference_(request_success|exec_count|compute_infer_duration)" > $W/c/metrics.txt
fi
if [[ ,$PHASES, == *,d,* ]]; then
  stamp "(d) perf_analyzer"
  URL=localhost:18001 CHECKPOINT=$CKPT CONCURRENCY=${CONC_D:-$CONC} MEASUREMENT_MS=${PA_MS:-4000} \
    PERF_ANALYZER=/tmp/site/perf_analyzer/bin/perf_analyzer timeout ${D_TIMEOUT:-240} bash scripts/perf_analyzer.sh $W/pa
fi
if [[ ,$PHASES, == *,t,* ]]; then
  # Token-level tensorrt_llm directly (no pre/postprocessing). On the H200 its stub hung ("not healthy") at
  # the first direct request: run last, bounded, then dump the stub threads' state.
  stamp "(c) tensorrt_llm token-level"
  timeout ${T_TIMEOUT:-90} $BENCH --url localhost:18001 --targets tensorrt_llm $ENGINE --concurrency ${CONC_T:-$CONC} \
    --duration ${DUR_C:-$DUR} --request-timeout 20 --label "H200 bench-1b: tensorrt_llm token-level" --out $W/t
  for pid in $(grep -las "tensorrt_ll[m]/1/" /proc/[0-9]*/cmdline | grep -o "[0-9]*" | head -3); do
    echo "--- stub $pid: $(tr '\0' ' ' < /proc/$pid/cmdline | cut -c1-160)"; grep -E "State|Threads" /proc/$pid/status
    for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm) $(cat $t/wchan 2>/dev/null)"; done | sort -k3 | uniq -c -f2 | head -20
    command -v gdb >/dev/null && timeout 20 gdb -p $pid -batch -ex "thread apply all bt 12" 2>/dev/null | grep -E "^#|^Thread" | head -120
  done
  tail -n 30 $W/tritonserver.log
fi
if [ -f "$W/tritonserver.log.pid" ]; then
  kill "$(cat $W/tritonserver.log.pid)"; sleep 3; rm -f "$W/tritonserver.log.pid"
fi
if [[ ,$PHASES, == *,b,* ]]; then
  stamp "(b) variants: no end ids (plain sampling), CUDA graphs"
  $BENCH --targets engine $ENGINE --ignore-eos --concurrency ${CONC_B:-$CONC} --duration $DUR --label "graphs, no end ids" --out $W/b_graphs_noeos
  if [ -n "${EAGER:-}" ]; then
    stamp "(b) variants: eager (--engine-eager)"
    $BENCH --targets engine $ENGINE --engine-eager --ignore-eos --concurrency 1,64 --duration $DUR --label "eager, no end ids" --out $W/b_eager_noeos
  fi
fi
if [[ ,$PHASES, == *,a,* ]]; then
  stamp "(a) Hugging Face generate"
  timeout ${A_TIMEOUT:-240} python3 scripts/h200/hf_baseline.py "$CKPT" $W/hf.json $CONC $STATIC_BS
fi
stamp "pack"
tar -czf "$OUT/work-${PHASES//,/}.tgz" --exclude='*.profile.json' -C build/h200 work
tar -czf "$OUT/pa-profiles-${PHASES//,/}.tgz" -C build/h200 $(cd build/h200 && ls work/pa/*.profile.json 2>/dev/null) 2>/dev/null || true
for f in throughput.png latency.png; do [ -f $W/c/$f ] && cp $W/c/$f "$OUT/c-$f"; done
stamp "done"
