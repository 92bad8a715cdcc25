#!/usr/bin/env bash
# The whole H200 benchmark, run ON the GPU machine from the repository root, one device call:
#   bash scripts/h200/run.sh [PHASES]      PHASES: comma list (default p,b,o,c,a)
# Needs $H (default build/h200; carry it) prepared here by `bash scripts/h200/prepare.sh [H]`: the trimmed
# nvidia-pytriton files, wheels (tritonclient, perf-analyzer, pydantic...), the SmolLM2 tokenizer and
# the model repositories rendered from scripts/h200/bench-1b*.yaml.
#   weights  random bf16 1.07B Llama built on the GPU (scripts/h200/make_weights.py), always
#   p        where a step goes: scripts/h200/step_profile.py (graph variants, prefill, engine split)
#   b        engine in-process (tools/bench.py --targets engine) at CONC, min_tokens = max_tokens like the
#            Triton targets; B_SPECS (space-separated spec files) runs it once more per spec; with COMPILE=1 also with torch.compile (CONC_COMPILE); with EAGER=1 also eager at 1,64
#   o        the same with the code in $BASE (default .h13/base: the tree before this work), for a
#            side-by-side "before" in the same run
#   c        for each repository in REPOS (default model_repository; REPO@VAR=VALUE sets an environment variable
#            for that server only, e.g. model_repository@LLMSERVE_X=1): tritonserver, 2 smoke requests to the
#            ensemble and 2 direct token-level requests to tensorrt_llm (the request that killed the
#            Python 3.12 stub), then tools/bench.py on C_TARGETS (ensemble,tensorrt_llm) and Triton's metrics
#   d        perf_analyzer on the ensemble of the first repository (scripts/perf_analyzer.sh)
#   a        Hugging Face generate with cache_implementation="static" at STATIC_BS (the in-run peer)
# Results go to $H/work and, packed, to $OUT; a summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
PHASES=${1:-p,b,o,c,a}
H=${H:-build/h200}
BASE=${BASE:-.h13/base}
OUT=${OUT:-$H/out}
mkdir -p "$OUT" "$H/work"
W=$H/work
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 LLMSERVE_USE_PYTRITON=1
export LLMSERVE_ADMIN_KEY=${LLMSERVE_ADMIN_KEY:-h200-bench-$RANDOM}  # perf_analyzer reads the model config with it
# The servers' admin key: perf_analyzer needs it to read model configs (a restricted API).
export LLMSERVE_ADMIN_KEY=${LLMSERVE_ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
CONC=${CONC:-1,8,32,64,128}
DUR=${DUR:-6}
STATIC_BS=${STATIC_BS:-64}
REPOS=${REPOS:-model_repository}
CKPT=build/checkpoints/bench-1b
SPEC=scripts/h200/bench-1b.yaml
has() { [[ ,$PHASES, == *,$1,* ]]; }
stamp() { echo "[$(date +%T)] $*"; }

stamp "setup"
if [ ! -d /tmp/site/pytriton ]; then
  mkdir -p /tmp/site && tar -xJf $H/pytriton-trim.tar.xz -C /tmp/site &&
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $H/whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
# Triton's Python stubs need numpy < 2 (see stub_venv.sh); everything else keeps the machine's numpy 2.
bash scripts/h200/stub_venv.sh python3 $H/stubwhl/numpy-1.26.4-cp312-*.whl /tmp/stubvenv $H/whl/*.whl || exit 1
chmod +x /tmp/site/perf_analyzer/bin/perf_analyzer 2>/dev/null
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c 'import sys, torch, transformers, platform; print(sys.version.split()[0], torch.__version__, transformers.__version__, platform.libc_ver())'
nproc; date -u

stamp "weights"
python3 scripts/h200/make_weights.py $H/tokenizer "$CKPT" || exit 1

ENGINE="--engine-device cuda --engine-dtype bfloat16 --engine-max-slots 128 --engine-max-seq-len 512"
BENCH_ARGS="--spec $SPEC --checkpoint $CKPT --input-len 128 --output-len 128 --no-progress"
BENCH="python3 tools/bench.py $BENCH_ARGS"

if has p; then
  stamp "(p) step profile"
  timeout ${P_TIMEOUT:-150} python3 scripts/h200/step_profile.py "$CKPT" $W/profile.json
fi
if has b; then
  stamp "(b) engine in-process"
  timeout ${B_TIMEOUT:-120} $BENCH --targets engine $ENGINE --concurrency ${CONC_B:-$CONC} --duration $DUR \
    --label "engine, this tree" --out $W/b
  for spec in ${B_SPECS:-}; do  # more specs of the same model, e.g. scripts/h200/bench-1b-nokernels.yaml
    name=$(basename $spec .yaml)
    timeout ${B_TIMEOUT:-120} python3 tools/bench.py ${BENCH_ARGS/--spec $SPEC/--spec $spec} --targets engine $ENGINE \
      --concurrency ${CONC_B:-$CONC} --duration $DUR --label "engine, $name" --out $W/b-$name
  done
  if [ -n "${COMPILE:-}" ]; then  # the decode body through torch.compile before capture (GraphOptions.compile)
    LLMSERVE_COMPILE=1 timeout ${B_TIMEOUT:-240} $BENCH --targets engine $ENGINE --concurrency ${CONC_COMPILE:-64,128} \
      --duration $DUR --label "engine, torch.compile" --out $W/b_compile
  fi
  if [ -n "${EAGER:-}" ]; then
    LLMSERVE_CUDA_GRAPHS=0 $BENCH --targets engine $ENGINE --engine-eager --concurrency 1,64 --duration $DUR \
      --label "eager" --out $W/b_eager
  fi
fi
if has o && [ -f "$BASE/tools/bench.py" ]; then
  stamp "(o) engine in-process, the tree before ($BASE)"
  (export PYTHONPATH=/tmp/site:$PWD/$BASE; timeout ${O_TIMEOUT:-120} python3 $BASE/tools/bench.py $BENCH_ARGS \
    --targets engine $ENGINE --concurrency ${CONC_O:-64,128} --duration $DUR --label "engine, before" --out $W/o)
fi
first=1
for entry in ${REPOS//,/ }; do  # REPO or REPO@VAR=VALUE (an environment variable for that server only)
  has c || has d || break
  repo=${entry%@*}; setting=; [ "$entry" != "$repo" ] && setting=${entry#*@}
  tag=$repo${setting:+-${setting//[^A-Za-z0-9.]/_}}
  stamp "tritonserver on $repo ${setting:+with $setting}"
  env $setting /tmp/stubvenv/bin/python3 scripts/h200/triton_up.py $H/$repo 18000 18001 18002 "$W/tritonserver-$tag.log" ||
    continue
  ok=1
  stamp "smoke: 2 requests to the ensemble, 2 direct token-level requests to tensorrt_llm"
  timeout 90 $BENCH --url localhost:18001 --targets ensemble --concurrency 1 --requests 2 --warmup 0 \
    --request-timeout 30 --out $W/smoke-$tag || ok=0
  timeout 90 $BENCH --url localhost:18001 --targets tensorrt_llm --concurrency 1 --requests 2 --warmup 0 \
    --request-timeout 30 --out $W/smoke-trt-$tag || ok=0
  dmesg 2>/dev/null | grep -i "segfault" | tail -3
  if [ $ok = 0 ]; then echo "SMOKE FAILED on $tag"; tail -n 60 "$W/tritonserver-$tag.log"; fi
  if has c && [ $ok = 1 ]; then
    stamp "(c) $tag: ${C_TARGETS:-ensemble,tensorrt_llm} over gRPC streaming"
    timeout ${C_TIMEOUT:-200} $BENCH --url localhost:18001 --targets ${C_TARGETS:-ensemble,tensorrt_llm} \
      --concurrency ${CONC_C:-$CONC} --duration $DUR --request-timeout ${RT:-60} --label "H200 bench-1b via Triton ($tag)" \
      --out $W/c-$tag
    curl -s localhost:18002/metrics | grep -E "^nv_inference_(request_success|exec_count|compute_infer_duration|queue_duration)" \
      > $W/c-$tag/metrics.txt
  fi
  if has d && [ $ok = 1 ] && [ $first = 1 ]; then
    stamp "(d) perf_analyzer on $repo"
    URL=localhost:18001 CHECKPOINT=$CKPT CONCURRENCY=${CONC_D:-$CONC} MEASUREMENT_MS=${PA_MS:-4000} \
      PERF_ANALYZER=/tmp/site/perf_analyzer/bin/perf_analyzer timeout ${D_TIMEOUT:-200} bash scripts/perf_analyzer.sh $W/pa
  fi
  first=0
  kill "$(cat $W/tritonserver-$tag.log.pid)"; sleep 4; rm -f "$W/tritonserver-$tag.log.pid"
done
if has a; then
  stamp "(a) Hugging Face generate, static cache at $STATIC_BS"
  timeout ${A_TIMEOUT:-200} python3 scripts/h200/hf_baseline.py "$CKPT" $W/hf.json "${A_DEFAULT_BS:-}" $STATIC_BS
fi
stamp "pack"
tar -czf "$OUT/work-${PHASES//,/}.tgz" --exclude='*.profile.json' -C $H work
python3 scripts/h200/summary.py $W | tee "$OUT/summary.md"
stamp "done"
