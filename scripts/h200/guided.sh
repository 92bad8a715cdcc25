#!/usr/bin/env bash
# Issue 19's cost of guided decoding on the H200: tools/bench_guided.py (the torch engine in-process, its
# sampler and xgrammar's masks as tensorrt_llm runs them) on the random-weight 1.07B Llama of bench-1b.yaml,
# bf16 with CUDA graphs, 128 tokens, at CONC concurrent requests: unguided, all guided, half and half;
# for each tree of TREES (after: the working tree; base: ceiling-prepare.sh's BASE_COMMIT).
# Prepared HERE by scripts/h200/ceiling-prepare.sh (build/h17, carried; it holds the xgrammar wheels);
# ON the GPU machine: bash build/h17/after/scripts/h200/guided.sh   Output: $OUT/guided.log.
set -uo pipefail
H=${H:-build/h17}
OUT=${OUT:-$H/out}
CONC=${CONC:-8,64}
TREES=${TREES:-after}
CKPT=build/checkpoints/bench-1b
mkdir -p "$OUT" /tmp/site-g
exec > >(tee -a "$OUT/guided.log") 2>&1
echo "[$(date +%T)] setup"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-g $H/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site-g:$PWD/$H/after PYTHONUNBUFFERED=1
python3 $H/after/scripts/h200/make_weights.py $H/tokenizer $CKPT || exit 1
python3 -c 'import sys, torch, xgrammar; print(sys.version.split()[0], torch.__version__, "xgrammar", __import__("importlib.metadata").metadata.version("xgrammar"))'
for tree in ${TREES//,/ }; do  # TREES=base,after: the tree before a change and this one, in one call
  for c in ${CONC//,/ }; do
    echo "[$(date +%T)] bench_guided $tree c=$c"
    PYTHONPATH=/tmp/site-g:$PWD/$H/$tree timeout ${GUIDED_TIMEOUT:-150} python3 $H/$tree/tools/bench_guided.py \
      --device cuda --checkpoint $CKPT --concurrency $c --tokens 128 --rounds 3
  done
done
echo "[$(date +%T)] guided done"
