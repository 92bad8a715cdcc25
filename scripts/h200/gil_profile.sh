#!/usr/bin/env bash
# Who holds the engine stub's GIL, and where each Python process of the torch layout spends its time, on the
# real engine under load (issue 17 goal 3: the ensemble reached 0.55-0.68 of the in-process engine and
# token-level 0.76-0.86, run.sh 2026-12-02 17:50 UTC). ON the GPU machine, build/h200 carried (prepare.sh
# with a py-spy wheel in $H/whl):
#   bash scripts/h200/gil_profile.sh          knobs: REPO (model_repository), CONC (128), SECS (8), TARGETS
# For each target: tools/bench.py at CONC for SECS+6 s; meanwhile py-spy records, as collapsed stacks,
#   gil-TARGET.txt    the engine stub, samples of the thread holding the GIL only (--gil)
#   all-TARGET.txt    the engine stub, every thread, idle included (--idle): where its threads wait
#   post-TARGET.txt   one postprocessing stub (ensemble only)
# and the engine stub's CPU seconds per thread over the window (threads-TARGET.txt). Results in $OUT.
# STUB (default tensorrt_llm) names the model whose first stub is "the engine stub" (tensorrt_llm_cpp: the
# stand-in of the tensorrtllm layout); ALSO (space-separated models) records one stub of each with --gil too
# (gil-TARGET-MODEL.txt), e.g. ALSO=tensorrt_llm for a relay; ALSO_FLAGS replaces --gil (ALSO_FLAGS="--idle
# --threads": every thread, waits included, e.g. ALSO=preprocessing for where a batch's time goes). The tensorrtllm layout from build/h17:
#   cd build/h17/after && H=build/h17 REPO=after/repos/model_repository-trtllm-st4 STUB=tensorrt_llm_cpp \
#     ALSO=tensorrt_llm TARGETS=tensorrt_llm LLMSERVE_NULL_STEP_MS=1 bash scripts/h200/gil_profile.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
H=${H:-build/h200}
OUT=${OUT:-$H/out}
REPO=${REPO:-model_repository}
CONC=${CONC:-128}
SECS=${SECS:-8}
TARGETS=${TARGETS:-ensemble,tensorrt_llm}
W=/tmp/gilw
mkdir -p "$OUT" $W
exec > >(tee -a "$OUT/gil.log") 2>&1
export PYTHONUNBUFFERED=1 LLMSERVE_USE_PYTRITON=1
export LLMSERVE_ADMIN_KEY=${LLMSERVE_ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
CKPT=build/checkpoints/bench-1b
stamp() { echo "[$(date +%T)] $*"; }

stamp "setup"
mkdir -p /tmp/site && tar -xJf $H/pytriton-trim.tar.xz -C /tmp/site &&
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $H/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
bash scripts/h200/stub_venv.sh python3 $H/stubwhl/numpy-1.26.4-cp312-*.whl /tmp/stubvenv $H/whl/*.whl || exit 1
py-spy --version || exit 1
python3 scripts/h200/make_weights.py $H/tokenizer "$CKPT" || exit 1
if [ -d $H/$REPO/tensorrt_llm_cpp ]; then  # the stand-in reads xgrammar's tokenizer info, which an engine build writes
  python3 -c "
from llmserve.spec import load_spec, ROOT
from llmserve.spec.trtllm import engine_dir
from llmserve.trtllm.build import write_xgrammar_tokenizer_info
spec = load_spec(ROOT / 'scripts/h200/bench-1b-trtllm.yaml')
write_xgrammar_tokenizer_info(spec, engine_dir(spec))" || exit 1
fi
/tmp/stubvenv/bin/python3 scripts/h200/triton_up.py $H/$REPO 18000 18001 18002 $W/triton.log || exit 1
BENCH="python3 tools/bench.py --spec scripts/h200/bench-1b.yaml --checkpoint $CKPT --input-len 128 --output-len 128
  --no-progress --request-timeout 60 --url localhost:18001"
timeout 90 $BENCH --targets ensemble --concurrency 8 --requests 64 --warmup 8 --out $W/warm > /dev/null 2>&1
engine=$(pgrep -f "backend_stub .*/${STUB:-tensorrt_llm}/1/model.py" | head -1)
post=$(pgrep -f "backend_stub .*/postprocessing/1/model.py" | head -1)
echo "engine stub $engine, postprocessing stub $post"
cpu() {  # per-thread CPU seconds of pid $1: "tid name seconds"
  local tick; tick=$(getconf CLK_TCK)
  for t in /proc/$1/task/*; do
    echo "$(basename $t) $(cat $t/comm | tr ' ' _) $(awk -v k=$tick '{print ($14 + $15) / k}' $t/stat)"
  done | sort
}
for target in ${TARGETS//,/ }; do
  stamp "$target at c=$CONC"
  timeout $((SECS + 60)) $BENCH --targets $target --concurrency $CONC --duration $((SECS + 6)) --out $W/b-$target \
    > $W/bench-$target.log 2>&1 &
  bpid=$!
  sleep 4  # past the warm-up
  cpu $engine > $W/c0
  py-spy record -p $engine -d $SECS -r 200 --gil -f raw -o $OUT/gil-$target.txt > /dev/null 2>&1 &
  p1=$!
  py-spy record -p $engine -d $SECS -r 100 --idle --threads -f raw -o $OUT/all-$target.txt > /dev/null 2>&1 &
  p2=$!
  [ $target = ensemble ] && py-spy record -p $post -d $SECS -r 100 -f raw -o $OUT/post-$target.txt > /dev/null 2>&1 &
  also=()
  for m in ${ALSO:-}; do
    pid=$(pgrep -f "backend_stub .*/$m/1/model.py" | head -1)
    py-spy record -p $pid -d $SECS -r 200 ${ALSO_FLAGS:---gil} -f raw -o $OUT/gil-$target-$m.txt > /dev/null 2>&1 &
    also+=($!)
  done
  wait $p1 $p2 "${also[@]}"
  cpu $engine > $W/c1
  join <(sort $W/c0) <(sort $W/c1) | awk -v s=$SECS '{printf "%s %-18s %.2f cores\n", $1, $2, ($5 - $3) / s}' |
    sort -k3 -rn | head -24 > $OUT/threads-$target.txt
  py-spy dump -p $engine > $OUT/dump-$target.txt 2>&1
  wait $bpid
  grep "concurrency=" $W/bench-$target.log
  cat $OUT/threads-$target.txt | head -12
done
kill "$(cat $W/triton.log.pid)"; sleep 3
cp $W/triton.log $OUT/ 2>/dev/null
stamp "done"
