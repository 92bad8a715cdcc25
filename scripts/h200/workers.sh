#!/usr/bin/env bash
# Issue 17 goal 4: the OpenAI API with one worker process vs several, next to the ensemble of both layouts,
# with the engine out of the picture (the null model, LLMSERVE_NULL_STEP_MS), 128 tokens in and out.
# Prepared HERE by scripts/h200/ceiling-prepare.sh (build/h17, carried); ON the GPU machine, one device call:
#   bash build/h17/after/scripts/h200/workers.sh
# Points (each one tools/bench.py run wrapped by scripts/h200/hops.py, at CONC = 64,128,256), in this order
# (the ones that matter most first, should the call run out of time):
#   torch layout: ensemble, then the OpenAI API as
#     w1   one process (--workers 1)
#     hN   --workers N for N in WORKERS (uvicorn's supervisor, one shared socket); wN the same over gRPC
#     rpN  N single-worker frontends with --reuse-port (the kernel spreads connections)
#   tensorrtllm layout (relay + stand-in): ensemble; the null engine in-process.
# Knobs: CONC, WORKERS, REUSE, CLIENTS, DUR; INTERLEAVE=1 (the OpenAI points alternate ensemble and openai
# in every stream: the TTFT the frontend adds, paired); TORCH_TARGETS (torch-layout targets, default ensemble);
# TORCH_ENVS (";"-separated variable sets for extra torch-layout servers, "-" for none: the first is the
# one the OpenAI points use); OPENAI=0, TRTLLM=0, ENGINE=0 skip those parts; PROBE=1 prints the engine
# stub's CPU seconds per thread over each point (py-spy names the Python threads).
# The OpenAI points read the token-level model themselves (hN, wN; openai.token_level), and with VIA_ENSEMBLE=1 (the
# default) the same frontend through the ensemble too (eN, --token-model none). W1=0 skips the one-process frontend; for the tensorrtllm layout TRTLLM_TARGETS (space-separated, default
# ensemble; tensorrt_llm_cpp reads the stand-in itself, token-level, from CLIENTS processes), TRTLLM_WORKERS (OpenAI frontends with that many workers on it) and TRTLLM_REPOS (the rendered
# tensorrtllm-layout repositories to run, one server each; default model_repository-trtllm), TRTLLM_TREES
# ("base after": the same repositories, and the OpenAI frontend, of the base commit first, so one call compares the two).
# TRANSPORTS (space-separated, default http): how the token-level OpenAI points read the engine model, one
# frontend per transport and worker count: http (hN: openai.token_transport http, the default) or grpc (wN,
# bench-1b-grpc.yaml).
# TORCH_TREES ("base after"): the torch layout of the base tree too, before this tree's (its OpenAI points: after only).
# OPENAI_TREES ("base after"): the torch layout's token-level OpenAI points with the base tree's frontend first.
# TORCH_REPOS (space-separated, default model_repository): the torch-layout repositories to run, one server each
# (model_repository-pre4: bench-1b-pre4.yaml; the OpenAI points run on the first only). POINT_CLIENTS (default 1):
# each torch-layout point once per entry, read by tools/bench.py --clients k (k8: 8 processes of C/8 streams over one
# window, pooled: one client process can be the limit of what it reads; the in-process engine's bench has no client).
# The OpenAI points also report the frontend's own split of the first token from its access lines
# (first_byte_ms - triton_first_ms: what the frontend added, server side).
# REAL_TORCH=1: the torch-layout server (and ENGINE's in-process run) uses the real engine (random 1.07B bf16 weights, make_weights.py: CUDA
# graphs, the Triton kernels) instead of the null one, for what users run; the tensorrtllm layout stays null.
# RATES (comma list of requests/s, default none): each torch-layout target also under Poisson arrivals at each rate
# (open loop, RATE_CLIENTS processes, in flight capped at RATE_CAP), and ENGINE's in-process run at the same rates.
# READERS (comma list of concurrencies, default none): on each tensorrtllm-layout server, tools/bench_token_transport.py
# reads tensorrt_llm_cpp from one process with a thread per stream, as the relay does (grpc-threads: its own
# synchronous gRPC reader; http-threads: generate_stream over http.client), and over aiohttp / grpc.aio: CPU per token.
# TRTLLM_EXTRAS (";"-separated, "-" for none): tritonserver flag sets, each running the tensorrtllm repositories
# once more (tag -x1, -x2...), e.g. "-;--http-thread-count=32".
# The OpenAI load comes from tools/bench.py --clients CLIENTS (CONC / CLIENTS streams a process, one window,
# percentiles pooled), so that one client process is not the limit being measured. Results in $OUT: workers.log, points.tgz, summary.md.
set -uo pipefail
H=${H:-build/h17}
OUT=${OUT:-$H/out}
ROOT=$PWD
W=/tmp/h17w
mkdir -p "$OUT" $W
exec > >(tee -a "$OUT/workers.log") 2>&1
export PYTHONUNBUFFERED=1 LLMSERVE_USE_PYTRITON=1
export LLMSERVE_ADMIN_KEY=${LLMSERVE_ADMIN_KEY:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
STEP=${NULL_STEP_MS:-1}
CONC=${CONC:-64,128,256}
RATES=${RATES:-}
READERS=${READERS:-}
WORKERS=${WORKERS-4,8}
REUSE=${REUSE-4}  # REUSE= (empty): none
CLIENTS=${CLIENTS:-2}
TORCH_TARGETS=${TORCH_TARGETS:-ensemble}
DUR=${DUR:-3}
CKPT=build/checkpoints/bench-1b
stamp() { echo "[$(date +%T)] $*"; }

stamp "setup"
mkdir -p /tmp/site && tar -xJf $H/pytriton-trim.tar.xz -C /tmp/site &&
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $H/whl/*.whl || exit 1
(cd $H/after && bash scripts/h200/stub_venv.sh python3 $ROOT/$H/stubwhl/numpy-1.26.4-cp312-*.whl /tmp/stub-after $ROOT/$H/whl/*.whl) || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc; date -u
if [ "${REAL_TORCH:-0}" = 1 ]; then python3 $H/after/scripts/h200/make_weights.py $H/tokenizer $CKPT || exit 1; else
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

export PYTHONPATH=/tmp/site:$ROOT/$H/after
if [ "${TRTLLM:-1}" = 1 ]; then  # the stand-in reads xgrammar's tokenizer info, which an engine build writes (none here)
  (cd $H/after && python3 -c "
from llmserve.spec import load_spec, ROOT
from llmserve.spec.trtllm import engine_dir
from llmserve.trtllm.build import write_xgrammar_tokenizer_info
spec = load_spec(ROOT / 'scripts/h200/bench-1b-trtllm.yaml')
write_xgrammar_tokenizer_info(spec, engine_dir(spec))") || exit 1
fi
export PATH=/tmp/site/bin:$PATH  # py-spy
python3 -c 'import sys, torch, uvicorn, prometheus_client as p; print(sys.version.split()[0], torch.__version__, "uvicorn", uvicorn.__version__)'
BENCH0="python3 $H/after/tools/bench.py --spec $H/after/scripts/h200/bench-1b.yaml --checkpoint $CKPT --input-len 128 \
  --output-len 128 --no-progress --request-timeout 60"  # one line: openai_point runs it inside bash -c
BENCH="$BENCH0 --duration $DUR"
HOPS="python3 $H/after/scripts/h200/hops.py --metrics localhost:18002 --output-len 128"

up() {  # up REPO TAG [VAR=VALUE...]: the variables go to tritonserver and its stubs
  local repo=$1 tag=$2; shift 2
  stamp "tritonserver: $tag $*"
  local tree=${TREE:-after}  # TREE=base: the prepared base commit's code and repositories
  local null=(LLMSERVE_NULL_STEP_MS=$STEP); [ "${REAL:-0}" = 1 ] && null=()  # REAL=1: the real engine
  (cd $H/$tree && env PYTHONPATH=/tmp/site:$ROOT/$H/$tree "${null[@]}" "$@" \
    /tmp/stub-after/bin/python3 scripts/h200/triton_up.py $ROOT/$H/$tree/repos/$repo 18000 18001 18002 $W/triton-$tag.log) || { tail -n 40 $W/triton-$tag.log; return 1; }
  TPID=$(cat $W/triton-$tag.log.pid)
}
down() {
  kill $TPID 2>/dev/null; for _ in $(seq 20); do kill -0 $TPID 2>/dev/null || break; sleep 0.5; done
  kill -9 $TPID 2>/dev/null
  for _ in $(seq 40); do (echo > /dev/tcp/127.0.0.1/18001) 2>/dev/null || break; sleep 0.5; done; sleep 1
}
threads() {  # threads: CPU seconds per thread of the tensorrt_llm stub, keyed "tid name" (py-spy names them)
  local pid=$(pgrep -f "backend_stub .*/tensorrt_llm/1/model.py" | head -1)
  python3 - $pid "$(py-spy dump -p $pid 2>/dev/null | sed -n 's/^Thread \([0-9]*\) ([a-z]*): "\(.*\)"/\1 \2/p')" <<'PY'
import os, sys
pid, names = sys.argv[1], dict(l.split(" ", 1) for l in sys.argv[2].splitlines() if " " in l)
tick = os.sysconf("SC_CLK_TCK")
for tid in os.listdir(f"/proc/{pid}/task"):
    f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    print(tid, names.get(tid, "native"), (int(f[11]) + int(f[12])) / tick)
PY
}
point() {  # point TAG TARGET CONC: one bench process (PROBE=1: and the engine stub's CPU per thread)
  local tag=$1 target=$2 c=$3
  [ "${PROBE:-0}" = 1 ] && threads > $W/t0
  timeout ${POINT_TIMEOUT:-50} $HOPS --triton-pid $TPID --top ensemble --label "$tag $target c=$c" \
    --bench-out $W/b-$tag-$target-$c --out $W/p-$tag-$target-$c.json -- \
    $BENCH --url localhost:18001 --targets $target --concurrency $c --out $W/b-$tag-$target-$c > $W/log-$tag-$target-$c 2>&1
  grep HOPS $W/log-$tag-$target-$c || tail -n 5 $W/log-$tag-$target-$c
  if [ "${PROBE:-0}" = 1 ]; then
    threads > $W/t1
    echo "THREADS $tag $target c=$c (CPU s over the point, top 8):"
    join <(sort $W/t0) <(sort $W/t1) | awk '{printf "  %s %-20s %.2f\n", $1, $2, $5 - $3}' | sort -k3 -rn | head -8
  fi
}
multi_point() {  # multi_point TAG TARGET LOAD N [BENCH ARGS...]: TARGET read by one bench with --clients N (N
  # processes, each its share of the load over one shared window, percentiles pooled: one client process can be
  # the limit of what it reads). LOAD: C streams, or rR for Poisson arrivals at R requests/s (open loop: no
  # closed-loop cohorts, so two targets at one rate compare what each adds to a request; in flight capped at
  # RATE_CAP). tensorrt_llm_cpp: the stand-in read token-level directly, one response per token.
  local tag=$1 target=$2 c=$3 n=$4; shift 4
  local bt=$target extra="$*" name=$target-$c-k$n load="--concurrency $c" label="c=$c"
  if [[ $c == r* ]]; then
    name=$target-$c load="--request-rate ${c#r} --max-concurrency $RATE_CAP" label="rate=${c#r}"
  fi
  [ $target = tensorrt_llm_cpp ] && bt=tensorrt_llm extra="--token-model tensorrt_llm_cpp $extra" name=cpp-$c
  timeout ${POINT_TIMEOUT:-50} $HOPS --triton-pid $TPID --top ${TOP:-$target} --label "$tag $target $label k=$n" \
    --bench-out $W/b-$tag-$name --out $W/p-$tag-$name.json -- \
    $BENCH --url localhost:18001 --targets $bt $extra $load --clients $n --out $W/b-$tag-$name \
    > $W/log-$tag-$name 2>&1
  grep HOPS $W/log-$tag-$name || tail -n 5 $W/log-$tag-$name
  python3 - $W/b-$tag-$name/results.json <<'PY'
import json, sys
s = json.loads(open(sys.argv[1]).read())["runs"][0]["summary"]
print("  each client's TTFT p50:", sorted(c["ttft_p50_ms"] or 0 for c in s.get("clients", [])))
PY
}
rate_point() { multi_point $1 $2 r$3 ${RATE_CLIENTS:-8}; }  # rate_point TAG TARGET R: R requests/s, RATE_CLIENTS processes
RATE_CAP=${RATE_CAP:-128}  # the engine's slots: arrivals beyond it wait in the bench, not in the server
backend_point() { TOP=tensorrt_llm_cpp multi_point $1 tensorrt_llm_cpp $2 $CLIENTS; }
torch_point() {  # torch_point TAG TARGET C (either layout): one point per entry of POINT_CLIENTS (1: one bench process)
  local k
  for k in ${POINT_CLIENTS:-1}; do
    if [ $k = 1 ]; then point $1 $2 $3; else multi_point $1 $2 $3 $k; fi
  done
}
openai_point() {  # openai_point TAG C FRONTEND_PID TOP: CLIENTS client processes of C/CLIENTS streams each
  local tag=$1 c=$2 fpid=$3 top=${4:-ensemble} each=$(( $2 / CLIENTS ))
  # One bench with --clients CLIENTS (one shared window, pooled); INTERLEAVE=1: CLIENTS bench processes started
  # together, each stream alternating ensemble and openai (paired TTFT; --interleave has no --clients).
  local cmd="$BENCH --openai-url localhost:19000 --targets openai --concurrency $c --clients $CLIENTS" files=1
  cmd="$cmd --out $W/b-$tag-$c-1 > $W/log-$tag-$c-1 2>&1"
  if [ "${INTERLEAVE:-0}" = 1 ]; then
    cmd="for i in \$(seq $CLIENTS); do $BENCH --openai-url localhost:19000 --url localhost:18001"
    cmd="$cmd --targets ensemble,openai --interleave --concurrency $each --out $W/b-$tag-$c-\$i > $W/log-$tag-$c-\$i 2>&1 & done; wait"
    files=$CLIENTS
  fi
  local l0=$(wc -l < $W/openai-$tag.log)  # this point's access lines: first_byte_ms, triton_first_ms (access.py)
  timeout ${POINT_TIMEOUT:-50} $HOPS --triton-pid $TPID --top $top --label "$tag openai c=$c" --pid frontend=$fpid \
    --out $W/p-$tag-openai-$c.json -- bash -c "$cmd" > $W/log-$tag-$c 2>&1
  tail -n +$(( l0 + 1 )) $W/openai-$tag.log > $W/access-$tag-$c.log
  python3 - $W $tag $c $files <<'PY'
import json, re, statistics, sys
from pathlib import Path
w, tag, c, n = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
# The frontend's own split of the first token (server side, no client): arrival -> first chunk out, and
# sent to Triton -> Triton's first token; their difference is what the frontend added.
pairs = [(float(a), float(b)) for a, b in re.findall(r"first_byte_ms=([0-9.]+) triton_first_ms=([0-9.]+)",
                                                     (w / f"access-{tag}-{c}.log").read_text())]
split = {}
if pairs:
    q = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]
    fb, tf, added = [a for a, _ in pairs], [b for _, b in pairs], [a - b for a, b in pairs]
    split = {"requests": len(pairs), "first_byte_p50": q(fb, 0.5), "triton_first_p50": q(tf, 0.5),
             "added_p50": round(q(added, 0.5), 1), "added_p90": round(q(added, 0.9), 1),
             "added_mean": round(statistics.mean(added), 1)}
files = [w / f"b-{tag}-{c}-{i}" / "results.json" for i in range(1, n + 1)]
every = [json.loads(f.read_text())["runs"] for f in files if f.exists()]  # per client: one run per target
p = json.loads((w / f"p-{tag}-openai-{c}.json").read_text())
p["bench"] = []
for target in ("openai", "ensemble"):
    runs = [r["summary"] for client in every for r in client if r["target"] == target]
    if runs:
        # one run pooled by --clients, or one per bench process (INTERLEAVE=1: TTFT the highest p50)
        each = [c["ttft_p50_ms"] or 0 for r in runs for c in r.get("clients", [])] or [r["ttft_ms"]["p50"] or 0 for r in runs]
        p["bench"].append({"target": target, "load": int(c), "clients": len(each),
                           "tok_s": round(sum(r["output_tokens_per_s"] for r in runs), 1),
                           "ttft_p50_ms": max((r["ttft_ms"]["p50"] or 0 for r in runs), default=None),
                           "ttft_p50_ms_each": sorted(each), "errors": sum(r["errors"] for r in runs)})
p["frontend_split_ms"] = split
(w / f"p-{tag}-openai-{c}.json").write_text(json.dumps(p, indent=1))
fe = p["cpu"].get("frontend", {})
line = "; ".join(f"{b['target']} {b['tok_s']} tok/s ttft50 {b['ttft_p50_ms']} err {b['errors']}" for b in p["bench"])
if len(p["bench"]) == 2:  # interleaved: the paired difference, per client, averaged
    p50 = [{r["target"]: r["summary"]["ttft_ms"]["p50"] for r in client} for client in every]
    added = [t["openai"] - t["ensemble"] for t in p50 if t.get("openai") and t.get("ensemble")]
    line += f"; TTFT p50 added (mean over clients) {sum(added) / max(len(added), 1):+.1f} ms"
print(f"HOPS {p['label']}: {line} ({p['bench'][0]['clients'] if p['bench'] else 0} clients); server {p['server_tok_per_s']} tok/s;"
      f" frontend {fe.get('cores')} cores ({fe.get('us_per_token')} us/tok); frontend split {split}")
PY
}
openai_variant() {  # openai_variant TAG TOP ARGS...: frontend(s) started by one shell, swept over CONC, stopped;
  local tag=$1 top=$2; shift 2  # TOP: the model the frontend calls (hops.py counts the tokens there)
  stamp "OpenAI API: $tag ($*)"
  setsid bash -c 'cd $0 && exec "$@"' $H/${TREE:-after} "$@" > $W/openai-$tag.log 2>&1 &
  local fpid=$!  # its own process group: one signal reaches every frontend and worker
  for _ in $(seq 120); do curl -sf localhost:19000/health > /dev/null && break; sleep 0.5; done
  sleep 2  # every worker up (the first healthy answer is one worker's)
  for c in ${CONC//,/ }; do openai_point $tag $c $fpid $top; done
  kill -TERM -- -$fpid; for _ in $(seq 30); do kill -0 -- -$fpid 2>/dev/null || break; sleep 0.5; done
  kill -0 -- -$fpid 2>/dev/null && echo "LEFT: processes of $tag after 15 s" && kill -9 -- -$fpid; wait $fpid 2>/dev/null
  for _ in $(seq 20); do (echo > /dev/tcp/127.0.0.1/19000) 2>/dev/null || break; sleep 0.5; done
  ls /tmp/llmserve-openai-19000-metrics 2>/dev/null && echo "LEFT: metric files of $tag"
}
FRONTEND="python3 -m llmserve.openai_api --spec scripts/h200/bench-1b.yaml --port 19000 --triton localhost:18001 --triton-http localhost:18000"
FRONTEND_GRPC="python3 -m llmserve.openai_api --spec scripts/h200/bench-1b-grpc.yaml --port 19000 --triton localhost:18001"
token_variants() {  # token_variants TAG N TOP [ARGS...]: the token-level frontend with N workers, once per transport
  local tag=$1 n=$2 top=$3; shift 3
  for tr in ${TRANSPORTS:-http}; do
    if [ $tr = grpc ]; then openai_variant ${tag}w$n $top $FRONTEND_GRPC --workers $n "$@"
    else openai_variant ${tag}h$n $top $FRONTEND --workers $n "$@"; fi
  done
}

# TORCH_ENVS: ;-separated variable sets, one torch-layout server each ("-": none), e.g. "-;OMP_NUM_THREADS=1";
# the OpenAI variants run on the first only (OPENAI=0: not at all), TORCH_TARGETS at every CONC on each.
IFS=';' read -ra ENVS <<< "${TORCH_ENVS:--}"
for i in "${!ENVS[@]}"; do
  [ $i = 0 ] && continue
  vars=${ENVS[$i]}; [ "$vars" = - ] && vars=""
  if REAL=${REAL_TORCH:-0} up model_repository torch$i $vars; then  # REAL_TORCH=1: these on the real engine too
    for t in ${TORCH_TARGETS//,/ }; do for c in ${CONC//,/ }; do torch_point torch$i $t $c; done; done
    down
  fi
done
vars=${ENVS[0]}; [ "$vars" = - ] && vars=""
TORCH_REPOS=${TORCH_REPOS:-model_repository}
for TREE in ${TORCH_TREES:-after}; do  # TORCH_TREES="base after": the base commit's torch layout first
for repo in $TORCH_REPOS; do  # e.g. "model_repository model_repository-pre4" (ceiling-prepare.sh renders them)
ttag=torch${repo#model_repository}; [ $TREE = after ] || ttag=$TREE-$ttag
if [ "${TORCH:-1}" = 1 ] && REAL=${REAL_TORCH:-0} up $repo $ttag $vars; then  # TORCH=0: the tensorrtllm layout only
  for t in ${TORCH_TARGETS//,/ }; do for c in ${CONC//,/ }; do torch_point $ttag $t $c; done; done
  for t in ${TORCH_TARGETS//,/ }; do for r in ${RATES//,/ }; do rate_point $ttag $t $r; done; done
  if [ "${OPENAI:-1}" = 1 ] && [ $TREE = after ] && [ $repo = ${TORCH_REPOS%% *} ]; then  # the first repository only
    [ "${W1:-1}" = 1 ] && openai_variant w1 tensorrt_llm $FRONTEND --workers 1
    for n in ${WORKERS//,/ }; do
      for ft in ${OPENAI_TREES:-after}; do  # OPENAI_TREES="base after": the base commit's frontend too (tag baseh4...)
        TREE=$ft token_variants "${ft%after}" $n tensorrt_llm  # the token-level path (openai.token_level)
      done
      [ "${VIA_ENSEMBLE:-1}" = 1 ] && openai_variant e$n ensemble $FRONTEND --workers $n --token-model none
    done
    for n in ${REUSE//,/ }; do
      openai_variant rp$n tensorrt_llm bash -c "for i in \$(seq $n); do $FRONTEND --workers 1 --reuse-port & done; wait"
    done
  fi
  down
fi
done
done
TREE=after
IFS=';' read -ra EXTRAS <<< "${TRTLLM_EXTRAS:--}"
for x in "${!EXTRAS[@]}"; do
extra=${EXTRAS[$x]}; [ "$extra" = - ] && extra=""
for TREE in ${TRTLLM_TREES:-after}; do  # TRTLLM_TREES="base after": the base commit's tensorrtllm layout too
for repo in ${TRTLLM_REPOS:-model_repository-trtllm}; do  # e.g. "model_repository-trtllm model_repository-trtllm-st4"
  tag=trtllm${repo#model_repository-trtllm}; [ $TREE = after ] || tag=$TREE-$tag; [ $x = 0 ] || tag=$tag-x$x
  if [ "${TRTLLM:-1}" = 1 ] && up $repo $tag "TRITON_EXTRA=$extra"; then
    for t in ${TRTLLM_TARGETS:-ensemble}; do for c in ${CONC//,/ }; do
      if [ $t = tensorrt_llm_cpp ]; then backend_point $tag $c; else torch_point $tag $t $c; fi
    done; done
    for c in ${READERS//,/ }; do  # the relay's way of reading the stand-in against the others, one client process
      stamp "readers $tag c=$c"
      timeout 240 python3 $H/after/tools/bench_token_transport.py --http localhost:18000 --grpc localhost:18001 \
        --server-pid $TPID --concurrency $c --requests 6 --rounds 2 --transports grpc-threads,http-threads,http,grpc \
        > $W/readers-$tag-c$c.log 2>&1; grep '"transport"' $W/readers-$tag-c$c.log || tail -n 20 $W/readers-$tag-c$c.log
    done
    for n in ${TRTLLM_WORKERS:-}; do  # the OpenAI API on this layout too (bench-1b.yaml: the model name the
      # bench asks for; so the token-level model is named: the C++ backend's, past the relay)
      token_variants $tag- $n tensorrt_llm_cpp --token-model tensorrt_llm_cpp
      [ "${VIA_ENSEMBLE:-1}" = 1 ] && openai_variant $tag-e$n ensemble $FRONTEND --workers $n --token-model none
    done
    down
  fi
done
done
done
TREE=after

if [ "${ENGINE:-1}" = 1 ] && [ "${REAL_TORCH:-0}" = 1 ]; then  # the real engine in-process: goal 3's yardstick
  stamp "real engine in-process (cuda, bf16)"
  timeout 150 $BENCH --targets engine --engine-device cuda --engine-dtype bfloat16 --engine-max-slots 128 \
    --engine-max-seq-len 512 --concurrency $CONC ${RATES:+--request-rate $RATES --max-concurrency $RATE_CAP} \
    --out $W/b-null-engine > $W/log-null-engine 2>&1
  tail -n 8 $W/log-null-engine
elif [ "${ENGINE:-1}" = 1 ]; then
  stamp "null engine in-process, step $STEP ms"
  LLMSERVE_NULL_STEP_MS=$STEP timeout 120 $BENCH --targets engine --engine-device cpu --engine-max-slots 256 \
    --engine-max-seq-len 512 --concurrency $CONC --out $W/b-null-engine > $W/log-null-engine 2>&1
  tail -n 6 $W/log-null-engine
fi

stamp "pack"
dmesg 2>/dev/null | grep -i segfault | tail -5
tar -czf $OUT/points.tgz -C $W --exclude='*.png' .
ENGINE_LABEL=$([ "${REAL_TORCH:-0}" = 1 ] && echo "real engine" || echo "null engine") python3 - $W <<'PY' | tee $OUT/summary.md
import json, os, sys
from pathlib import Path
d = Path(sys.argv[1])
if (d / "b-null-engine/results.json").exists():
    for r in json.loads((d / "b-null-engine/results.json").read_text())["runs"]:
        s = r["summary"]
        print(f"{os.environ['ENGINE_LABEL']} in-process {r['mode']}={r['load']}: {s['output_tokens_per_s']:,.0f} tok/s, "
              f"TTFT p50 {s['ttft_ms']['p50']} ms, mean {s['ttft_ms']['mean']} ms\n")
print("| point | bench tok/s | TTFT p50 ms | TTFT mean ms | engine queue / TTFT mean ms | errors | server tok/s | cores (us CPU per token) |")
print("|---|---|---|---|---|---|---|---|")
for f in sorted(d.glob("p-*.json"), key=lambda f: f.stat().st_mtime):
    p = json.loads(f.read_text())
    b = (p.get("bench") or [{}])[0]
    cores = ", ".join(f"{k} {v['cores']:.2f} ({v['us_per_token']})" for k, v in p["cpu"].items() if v["cores"] > 0.02)
    eng = "; ".join(f"{m} {v.get('queue_ms')} / {v.get('ttft_ms')}"  # over the window, else the whole point
                    for m, v in (p.get("engine_mean_ms_window") or p.get("engine_mean_ms", {})).items())
    print(f"| {p['label']} | {b.get('tok_s')} | {b.get('ttft_p50_ms')} | {b.get('ttft_mean_ms')} | {eng} | {b.get('errors')} |"
          f" {p['server_tok_per_s']} | {cores} |")
PY
stamp "done"
