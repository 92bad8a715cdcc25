#!/usr/bin/env bash
# Run HERE (not on the GPU machine) before the device run:  bash scripts/h200/prepare.sh [H] [BASE_COMMIT]
# Fills H (default build/h200; ignored: carry it) with what the GPU machine lacks and cannot download,
# about 58 MiB (the carry limit is 64 MiB together with the tree): trimmed nvidia-pytriton, wheels,
# the tokenizer, and one model repository per scripts/h200/bench-1b*.yaml (bench-1b.yaml ->
# model_repository, bench-1b-NAME.yaml -> model_repository-NAME). With BASE_COMMIT, also .h13/base:
# llmserve/ and tools/ of that commit, for run.sh's side-by-side "before" (phase o).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=${1:-build/h200}
mkdir -p $H/whl $H/tokenizer $H/stubwhl
if [ ! -f $H/pytriton-trim.tar.xz ]; then
  PIP="python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d $H/whl"
  for p in 28 27 17 24 35 38; do PIP="$PIP --platform manylinux_2_${p}_x86_64"; done
  $PIP --platform manylinux2014_x86_64 nvidia-pytriton==0.7.0 perf-analyzer==2.60.0 tritonclient==2.73.0 \
    python-rapidjson==1.25 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 \
    xgrammar==$(python3 -m pip show xgrammar | sed -n 's/^Version: //p') \
    apache-tvm-ffi==$(python3 -m pip show apache-tvm-ffi | sed -n 's/^Version: //p') \
    py-spy==$(python3 -m pip show py-spy 2>/dev/null | sed -n 's/^Version: //p' | grep . || echo 0.4.1)
  # (xgrammar: preprocessing and the engine import it; stub_venv.sh puts these wheels in the stubs' venv too;
  #  py-spy: names the Python threads of a stub for workers.sh PROBE=1; not in requirements.txt, so the
  #  version here, 0.4.1, unless this venv has one)
  # numpy 1.26.4 for the Triton Python stubs only (scripts/h200/stub_venv.sh): Triton 2.51's stub breaks under numpy 2.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d $H/stubwhl \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 numpy==1.26.4
  # The pytriton wheel is 55 MB: keep only the server, its libraries and the Python 3.12 backend stub.
  rm -rf $H/pt && mkdir $H/pt && (cd $H/pt && unzip -q ../whl/nvidia_pytriton-0.7.0-*.whl)
  rm -f $H/pt/nvidia_pytriton.libs/libpython3-*.so*
  for v in 3.8 3.9 3.10 3.11 3.13; do rm -rf $H/pt/pytriton/tritonserver/python_backend_stubs/$v; done
  rm -rf $H/pt/pytriton/{client,proxy,models,server,check}
  tar -cf - -C $H/pt . | xz -T2 -9e > $H/pytriton-trim.tar.xz
  rm -rf $H/pt $H/whl/nvidia_pytriton-*.whl
fi
cp build/checkpoints/smollm2-135m-instruct/{tokenizer.json,tokenizer_config.json,chat_template.jinja} $H/tokenizer/
for spec in scripts/h200/bench-1b*.yaml; do
  name=$(basename $spec .yaml); suffix=${name#bench-1b}
  rm -rf $H/model_repository$suffix
  python3 -c "
import sys
from llmserve.spec import load_spec, ROOT
from llmserve.repository.writer import write_repository
spec = load_spec(ROOT / sys.argv[1])  # the tensorrtllm layout is served by the stand-in for the C++ backend
write_repository(spec, sys.argv[1], ROOT / sys.argv[2], standin=spec.engine.kind == 'tensorrtllm')" $spec $H/model_repository$suffix
done
if [ -n "${2:-}" ]; then
  rm -rf .h13/base && mkdir -p .h13/base && git archive "$2" llmserve tools | tar -x -C .h13/base
fi
du -sh $H .h13/base 2>/dev/null || du -sh $H
