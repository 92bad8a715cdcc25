#!/usr/bin/env bash
# Issue 17: what the serving layers deliver with the engine out of the picture (the null model: a decode
# step of NULL_STEP_MS wall time, no compute), before and after, and the same layouts on the real engine.
# ON the GPU machine from the repository root, one device call (build/h17 carried, prepared here by
# scripts/h200/ceiling-prepare.sh):
#   bash build/h17/after/scripts/h200/ceiling.sh PHASES      PHASES: comma list of
#   e   null engine in-process (tools/bench.py --targets engine)
#   t   null engine, torch layout: ensemble, tensorrt_llm, OpenAI API (one frontend process)
#   b   null engine, tensorrtllm layout, the tree before: ensemble, tensorrt_llm
#   n   null engine, tensorrtllm layout, this tree: ensemble, tensorrt_llm
#   r   real engine (random bf16 1.07B, scripts/h200/make_weights.py): torch layout after, tensorrtllm
#       layout before and after, ensemble at CONC_R
# Plan the phases so the call ends inside the device's 10 minutes: a layout that hangs costs POINT_TIMEOUT
# per point (docs/perf-gpu.md, issue 17).
# Every load point is one tools/bench.py run wrapped by scripts/h200/hops.py (CPU per hop and Triton's
# request counts); results in $OUT: ceiling.log (all output), points.tgz (every point's JSON and bench
# results), summary.md.
set -uo pipefail
PHASES=${1:-n}
H=${H:-build/h17}
OUT=${OUT:-$H/out}
ROOT=$PWD
W=/tmp/h17work
mkdir -p "$OUT" $W
exec > >(tee -a "$OUT/ceiling.log") 2>&1
export PYTHONUNBUFFERED=1 LLMSERVE_USE_PYTRITON=1
export LLMSERVE_ADMIN_KEY=${LLMSERVE_ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
STEP=${NULL_STEP_MS:-1}  # 1 ms: the in-process engine loop then makes 40k / 63k / 94k tok/s at 64 / 128 / 256
CONC_N=${CONC_N:-64,128,256}
CONC_R=${CONC_R:-64,128}
DUR=${DUR:-4}
CKPT=build/checkpoints/bench-1b
has() { [[ ,$PHASES, == *,$1,* ]]; }
stamp() { echo "[$(date +%T)] $*"; }

stamp "setup"
mkdir -p /tmp/site && tar -xJf $H/pytriton-trim.tar.xz -C /tmp/site &&
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $H/whl/*.whl || exit 1
for tree in after base; do  # the stubs take llmserve from the tree the venv was made in (stub_venv.sh)
  (cd $H/$tree && bash scripts/h200/stub_venv.sh python3 $ROOT/$H/stubwhl/numpy-1.26.4-cp312-*.whl /tmp/stub-$tree $ROOT/$H/whl/*.whl) || exit 1
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)'; nproc; date -u
if has r; then
  stamp "weights"
  python3 $H/after/scripts/h200/make_weights.py $H/tokenizer $CKPT || exit 1
else  # the null model reads config.json only; the tokenizer serves pre- and postprocessing
  python3 - $H/tokenizer $CKPT <<'PY' || exit 1
import shutil, sys
from pathlib import Path
from transformers import AutoTokenizer, LlamaConfig
tok_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
tok = AutoTokenizer.from_pretrained(tok_dir)
LlamaConfig(vocab_size=len(tok), hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
            num_key_value_heads=8, max_position_embeddings=4096, tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, architectures=["LlamaForCausalLM"]).save_pretrained(out)
for f in tok_dir.iterdir():
    shutil.copy2(f, out / f.name)
PY
fi

export PYTHONPATH=/tmp/site:$ROOT/$H/after  # clients: the same bench for every tree
BENCH0="python3 $H/after/tools/bench.py --spec $H/after/scripts/h200/bench-1b.yaml --checkpoint $CKPT --input-len 128
  --output-len 128 --no-progress --request-timeout 60"
BENCH="$BENCH0 --duration $DUR"
HOPS="python3 $H/after/scripts/h200/hops.py --metrics localhost:18002 --output-len 128"

up() {  # up TREE REPO TAG [VAR=VALUE...]: tritonserver with TREE's code on TREE's repository REPO
  local tree=$1 repo=$2 tag=$3; shift 3
  stamp "tritonserver: $tag ($tree/$repo $*)"
  (cd $H/$tree && env "$@" /tmp/stub-$tree/bin/python3 scripts/h200/triton_up.py $ROOT/$H/$tree/repos/$repo \
    18000 18001 18002 $W/triton-$tag.log) || { tail -n 40 $W/triton-$tag.log; return 1; }
  TPID=$(cat $W/triton-$tag.log.pid)
}
down() {  # a server with hung requests waits its exit timeout: kill it, then wait for the ports
  kill $TPID 2>/dev/null; for _ in $(seq 20); do kill -0 $TPID 2>/dev/null || break; sleep 0.5; done
  kill -9 $TPID 2>/dev/null
  for _ in $(seq 40); do (echo > /dev/tcp/127.0.0.1/18001) 2>/dev/null || break; sleep 0.5; done; sleep 1
}
point() {  # point TAG TOP TARGET CONC [hops args...]
  local tag=$1 top=$2 target=$3 c=$4; shift 4
  timeout ${POINT_TIMEOUT:-60} $HOPS --triton-pid $TPID --top $top --label "$tag $target c=$c" "$@" \
    --bench-out $W/b-$tag-$target-$c --out $W/p-$tag-$target-$c.json -- \
    $BENCH --url localhost:18001 --targets $target --concurrency $c --out $W/b-$tag-$target-$c > $W/log-$tag-$target-$c 2>&1
  grep HOPS $W/log-$tag-$target-$c || tail -n 5 $W/log-$tag-$target-$c
}
sweep() {  # sweep TAG TOP TARGET CONCS
  for c in ${4//,/ }; do point $1 $2 $3 $c; done
}
smoke() {  # two requests first: a layout that cannot serve is reported, not benchmarked
  timeout 60 $BENCH0 --url localhost:18001 --targets $1 --concurrency 1 --requests 2 --warmup 0 \
    --out $W/smoke-$2-$1 > $W/smoke-$2-$1.log 2>&1 || { echo "SMOKE FAILED $2 $1"; tail -n 20 $W/smoke-$2-$1.log; return 1; }
}
openai() {  # openai TAG TREE CONCS: the OpenAI frontend of TREE (one process) on the running server
  (cd $H/$2 && exec python3 -m llmserve.openai_api --spec scripts/h200/bench-1b.yaml --port 19000 --triton localhost:18001 --triton-http localhost:18000 \
    > $W/openai-$1.log 2>&1) &
  local fpid=$!
  for _ in $(seq 60); do curl -sf localhost:19000/health > /dev/null && break; sleep 0.5; done
  for c in ${3//,/ }; do
    timeout ${POINT_TIMEOUT:-60} $HOPS --triton-pid $TPID --top ensemble --label "$1 openai c=$c" --pid frontend=$fpid \
      --bench-out $W/b-$1-openai-$c --out $W/p-$1-openai-$c.json -- \
      $BENCH --openai-url localhost:19000 --targets openai --concurrency $c --out $W/b-$1-openai-$c > $W/log-$1-openai-$c 2>&1
    grep HOPS $W/log-$1-openai-$c || tail -n 5 $W/log-$1-openai-$c
  done
  kill $fpid; wait $fpid 2>/dev/null
}

if has e; then
  stamp "(e) null engine in-process, step $STEP ms"
  LLMSERVE_NULL_STEP_MS=$STEP timeout 120 $BENCH --targets engine --engine-device cpu --engine-max-slots 256 \
    --engine-max-seq-len 512 --concurrency $CONC_N --out $W/b-null-engine > $W/log-null-engine 2>&1
  tail -n 8 $W/log-null-engine
fi
NULL="LLMSERVE_NULL_STEP_MS=$STEP"
if has t; then  # torch layout (and its OpenAI API)
  if up after model_repository null-torch $NULL; then
    smoke ensemble null-torch && { sweep null-torch ensemble ensemble $CONC_N; sweep null-torch tensorrt_llm tensorrt_llm $CONC_N
      openai null-torch after $CONC_N; }
    down
  fi
fi
if has b; then  # tensorrtllm layout, the tree before
  if up base model_repository-trtllm null-trt-before $NULL; then
    smoke ensemble null-trt-before && { sweep null-trt-before ensemble ensemble $CONC_N
      sweep null-trt-before tensorrt_llm tensorrt_llm $CONC_N; }
    down
  fi
fi
if has n; then  # tensorrtllm layout, this tree
  if up after model_repository-trtllm null-trt-after $NULL; then
    smoke ensemble null-trt-after && { sweep null-trt-after ensemble ensemble $CONC_N
      sweep null-trt-after tensorrt_llm tensorrt_llm $CONC_N; }
    down
  fi
fi
if has r; then
  stamp "(r) real engine"
  for entry in after:model_repository:real-torch base:model_repository-trtllm:real-trt-before \
               after:model_repository-trtllm:real-trt-after; do
    IFS=: read -r tree repo tag <<< "$entry"
    if up $tree $repo $tag; then
      smoke ensemble $tag && sweep $tag ensemble ensemble $CONC_R
      down
    fi
  done
fi
stamp "pack"
dmesg 2>/dev/null | grep -i segfault | tail -5
tar -czf $OUT/points.tgz -C $W --exclude='*.png' .
python3 - $W <<'PY' | tee $OUT/summary.md
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
if (d / "b-null-engine/results.json").exists():
    for r in json.loads((d / "b-null-engine/results.json").read_text())["runs"]:
        s = r["summary"]
        print(f"null engine in-process c={r['load']}: {s['output_tokens_per_s']:,.0f} tok/s, TTFT p50 {s['ttft_ms']['p50']} ms\n")
print("| point | bench tok/s | TTFT p50 ms | errors | server tok/s | calls/s | cores (us CPU per token) |")
print("|---|---|---|---|---|---|---|")
for f in sorted(Path(sys.argv[1]).glob("p-*.json"), key=lambda f: f.stat().st_mtime):
    p = json.loads(f.read_text())
    b = (p.get("bench") or [{}])[0]
    cores = ", ".join(f"{k} {v['cores']:.2f} ({v['us_per_token']})" for k, v in p["cpu"].items() if v["cores"] > 0.02)
    calls = ", ".join(f"{k} {v:,.0f}" for k, v in p["calls_per_s"].items())
    print(f"| {p['label']} | {b.get('tok_s')} | {b.get('ttft_p50_ms')} | {b.get('errors')} | {p['server_tok_per_s']} | "
          f"{calls} | {cores} |")
PY
stamp "done"
