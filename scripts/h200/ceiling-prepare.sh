#!/usr/bin/env bash
# Run HERE before the issue-17 ceiling run (python3 must have tritonclient: the venv first on PATH):
#   bash scripts/h200/ceiling-prepare.sh [BASE_COMMIT]
# Fills build/h17 (ignored; carry it, about 60 MiB with the tree): what scripts/h200/prepare.sh puts there
# (trimmed pytriton, wheels, numpy for the stubs, tokenizer), the OpenAI frontend's wheels for Python 3.12
# (the GPU image lacks fastapi, starlette, uvicorn; aiohttp for the HTTP token transport), and two trees side by side, each with its own
# rendered repositories of bench-1b.yaml (torch layout) and bench-1b-trtllm.yaml (tensorrtllm layout,
# stand-in): after = this working tree, base = BASE_COMMIT (default: main) plus engine/null_model.py,
# so the "before" runs the same null engine. The device runs: bash build/h17/after/scripts/h200/ceiling.sh
# (or workers.sh, guided.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
BASE=${1:-main}
H=${H:-build/h17}  # another folder (H=build/h17x) leaves build/h17 to another run
bash scripts/h200/prepare.sh $H
rm -rf $H/model_repository*  # each tree renders its own below
PIP="python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d $H/whl"
# aiohttp and its own: the frontend's HTTP token transport (openai.token_transport: http), workers.sh TRANSPORTS
$PIP aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
$PIP fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 opentelemetry-api==$(python3 -m pip show opentelemetry-api 2>/dev/null | sed -n 's/^Version: //p' || echo 1.39.1)
rm -f $H/whl/perf_analyzer-*.whl  # not used here: room for the trees
rm -rf $H/after $H/base && mkdir -p $H/after $H/base
git ls-files -co --exclude-standard llmserve tools scripts specs | tar -cf - -T - | tar -xf - -C $H/after
git archive "$BASE" llmserve tools scripts specs | tar -xf - -C $H/base
cp llmserve/engine/null_model.py llmserve/engine/loader.py $H/base/llmserve/engine/
[ -f $H/base/scripts/h200/bench-1b-trtllm.yaml ] || cp scripts/h200/bench-1b-trtllm.yaml $H/base/scripts/h200/
for tree in after base; do
  ln -s ../.. $H/$tree/build  # tree/build = build: the checkpoints, and the repositories' relative paths
  for spec in bench-1b bench-1b-pre4 bench-1b-trtllm bench-1b-trtllm-st4 bench-1b-trtllm-st8 bench-1b-trtllm-st16 bench-1b-trtllm-i4 bench-1b-trtllm-i8 bench-1b-trtllm-i8-grpc bench-1b-trtllm-i8-post8 bench-1b-trtllm-i8-pp1 bench-1b-trtllm-i8-r32 bench-1b-trtllm-i8-pp8 bench-1b-trtllm-i8-pp8-r8; do
    [ -f $H/$tree/scripts/h200/$spec.yaml ] || continue  # (base: a spec it does not have)
    (cd $H/$tree && PYTHONPATH=$PWD python3 -c "
import sys
from llmserve.spec import load_spec, ROOT
from llmserve.repository.writer import write_repository
spec = load_spec(ROOT / sys.argv[1])
write_repository(spec, sys.argv[1], ROOT / sys.argv[2], standin=spec.engine.kind == 'tensorrtllm')" \
      scripts/h200/$spec.yaml repos/model_repository${spec#bench-1b})
  done
done
find $H -name __pycache__ -prune -exec rm -rf {} +
du -sh $H; du -sh $H/* | sort -h | tail -5
