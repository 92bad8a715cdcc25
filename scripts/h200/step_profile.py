"""Where an engine step goes on the GPU machine (phase p of run.sh). Usage: step_profile.py CHECKPOINT OUT.json

1. GPU time of one captured decode step (graph replay, CUDA events, median of 50) for each GraphOptions
   variant at batch 64 and 128 (kv bucket 256: the mean context of 128 in / 128 out is 192), and the
   host wall time of a whole DecodeGraphs.step() (copy in, replay, read-back, sync).
2. Eager prefill of n prompts of 128 tokens (wall, synchronised, median of 10).
1b. The decode attention kernel against SDPA alone (bfloat16 error, GPU us per layer).
3. The engine's own steady state at 64 and 128 streams, with the default step and with SDPA attention (no end ids, 128 in / 128 out): wall time per
   step split into prefill / decode / accept (host), from timers around the engine's methods.
4. The default decode body's GPU time per kernel name at B=64 (eager under torch.profiler; PROFILE_NO_KERNELS=1
   skips it): what the next fusion should take."""

import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from llmserve.engine.cuda_graphs import DecodeGraphs, GraphOptions
from llmserve.engine.engine import Engine
from llmserve.engine.llama import LlamaModel
from llmserve.engine.prefill_graphs import PrefillGraphs
from llmserve.engine.sampling import SamplingParams
from llmserve.engine.sequence import Sequence

ckpt, out_path = sys.argv[1], sys.argv[2]
GPU = torch.cuda.is_available()  # without one: a smoke run of this script on a CPU (tiny checkpoint, few steps)
dev = torch.device("cuda" if GPU else "cpu")
m = LlamaModel(ckpt, dev, torch.bfloat16 if GPU else torch.float32, 128, 512)
results: dict = {"device": torch.cuda.get_device_name() if GPU else "cpu", "torch": torch.__version__}
try:
    import triton

    results["triton"] = triton.__version__
except ImportError:
    results["triton"] = None
SCALE = 1 if GPU else 0.02


def sync():
    if GPU:
        torch.cuda.synchronize()


def gpu_ms(fn, n=50) -> float:
    if not GPU:
        return wall_ms(fn, n)
    for _ in range(5):
        fn()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def wall_ms(fn, n=50) -> float:
    n = max(2, int(n * SCALE))
    for _ in range(3 if GPU else 1):
        fn()
    times = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# 1. decode step variants
variants = {
    "written-out attention, separate q/k rotary": GraphOptions(
        sdpa=False, fused_rope=False, fused_norm=False, kernels=False
    ),
    "+ SDPA attention, fused q/k rotary": GraphOptions(sdpa=True, fused_rope=True, fused_norm=False, kernels=False),
    "+ F.rms_norm (triton_kernels: false)": GraphOptions(kernels=False),
    "+ Triton kernels, SDPA attention": GraphOptions(kernels=True, attention_kernel=False),
    "+ Triton decode attention (the default)": GraphOptions(),
    "+ torch.compile of the body": GraphOptions(compile=True),
}
if os.environ.get("PROFILE_NO_COMPILE"):
    variants.pop("+ torch.compile of the body")
reference: dict[int, torch.Tensor] = {}  # logits of the first variant, to check the others against
rows = []
for name, opt in variants.items():
    for B in (64, 128):
        if opt.compile and (not GPU or B != 64):  # one compile is enough to compare
            continue
        g = DecodeGraphs(m, capture=False, options=opt)
        t0 = time.perf_counter()
        try:
            if GPU:
                g.capture([(B, 256)])
        except Exception as e:  # noqa: BLE001
            rows.append({"variant": name, "batch": B, "error": f"{type(e).__name__}: {e}"[:300]})
            print(rows[-1], flush=True)
            continue
        graph = g.graphs[(B, 256)][0] if GPU else SimpleNamespace(replay=lambda g=g: g._body(B, 256))
        slots = list(range(B))
        torch.manual_seed(B)  # the same inputs and cache for every variant
        toks = torch.randint(0, m.cfg.vocab_size, (B,)).tolist()
        pos = [150 + (i % 80) for i in range(B)]
        capture_s = time.perf_counter() - t0
        m.k_cache.normal_(generator=torch.Generator(dev).manual_seed(1))
        m.v_cache.normal_(generator=torch.Generator(dev).manual_seed(2))
        logits = g.step(slots, toks, pos, 240).logits(list(range(B))).clone()
        ref = reference.setdefault(B, logits)
        r = {
            "variant": name,
            "batch": B,
            "kv_bucket": 256,
            "triton_kernels": g.fused,
            "capture_s": round(capture_s, 1),
            "graph_gpu_ms": round(gpu_ms(graph.replay), 3),
            "step_wall_ms": round(wall_ms(lambda g=g: g.step(slots, toks, pos, 240)), 3),
            "rel_err_vs_first": float((logits - ref).norm() / ref.norm()),
            "argmax_agree": float((logits.argmax(-1) == ref.argmax(-1)).float().mean()),
        }
        rows.append(r)
        print(json.dumps(r), flush=True)
        del g, graph
        if GPU:
            torch.cuda.empty_cache()
results["decode"] = rows


# 1b. the decode attention kernel alone against SDPA, bfloat16 on the GPU (the CPU tests check it in float32
# only: Triton's interpreter cannot multiply bfloat16 tiles): max error, and GPU us of one layer's attention
def attention_check() -> list[dict]:
    from llmserve.engine import kernels

    nh, nkv, hd = m.cfg.num_heads, m.cfg.num_kv_heads, m.cfg.head_dim
    out = []
    for B in (64, 128):
        gen = torch.Generator(dev).manual_seed(3)
        q = torch.randn(B, nh, hd, device=dev, dtype=m.dtype, generator=gen)
        kc, vc = m.k_cache[0], m.v_cache[0]
        kc.normal_(generator=gen), vc.normal_(generator=gen)
        positions = torch.tensor([150 + (i % 80) for i in range(B)], device=dev)
        kb = 256
        visible = (torch.arange(kb, device=dev).view(1, kb) <= positions.view(B, 1)).view(B, 1, 1, kb)

        def sdpa():
            return F.scaled_dot_product_attention(
                q.view(B, nkv, nh // nkv, hd), kc[:B, :, :kb], vc[:B, :, :kb], attn_mask=visible
            ).view(B, nh, hd)

        def kernel(block_n=64, num_warps=4):
            return kernels.decode_attention(q, kc, vc, positions, kb, block_n=block_n, num_warps=num_warps)

        err = (kernel().float() - sdpa().float()).abs().max().item()
        r = {"batch": B, "kv_bucket": kb, "max_abs_err_vs_sdpa": round(err, 5), "sdpa_gpu_us": None}
        if GPU:
            r["sdpa_gpu_us"] = round(gpu_ms(sdpa) * 1e3, 1)
            for bn, nw in [(32, 2), (32, 4), (64, 2), (64, 4), (64, 8), (128, 4), (128, 8)]:  # (64, 4): the default
                r[f"kernel_gpu_us_n{bn}_w{nw}"] = round(gpu_ms(lambda bn=bn, nw=nw: kernel(bn, nw)) * 1e3, 1)
        out.append(r)
        print(json.dumps(r), flush=True)
    return out


if GPU:
    try:
        results["attention"] = attention_check()
    except Exception as e:  # noqa: BLE001
        results["attention"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(results["attention"], flush=True)

# 2. prefill: eager, and replayed from a graph (prefill_graphs.py)
pg = PrefillGraphs(m, 256, capture=GPU)
pre = []
for n in (1, 4, 16):
    tokens = torch.randint(0, m.cfg.vocab_size, (n, 128), device=dev)
    slots = torch.arange(n, device=dev)
    positions = torch.arange(128, device=dev).expand(n, 128)
    last = torch.full((n,), 127, device=dev)
    prompts = tokens.tolist()
    r = {
        "prompts": n,
        "tokens": 128,
        "eager_wall_ms": round(wall_ms(lambda: m.forward_eager(tokens, slots, positions, last, 128), n=10), 3),
        "graph_wall_ms": round(wall_ms(lambda: pg.run(prompts, list(range(n))), n=10), 3),
    }
    pre.append(r)
    print(json.dumps(r), flush=True)
results["prefill"] = pre  # (pg stays alive: freeing its graphs while others are captured breaks the capture)

# 3. the engine's steady state, timed per method: the default step, and the one with SDPA attention
m.prefill_graphs = PrefillGraphs(m, 256, capture=GPU)
spent: dict[str, float] = {}


def timed(obj, name):
    fn = getattr(obj, name)

    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0

    setattr(obj, name, wrapper)


eng_rows = []
for attention, conc in [(a, c) for a in ("kernel", "sdpa") for c in (64, 128)]:
    if conc == 64:
        m.graphs = None  # the previous step's graphs go before the next ones are captured
        if GPU:
            torch.cuda.empty_cache()
        m.graphs = DecodeGraphs(m, options=GraphOptions(attention_kernel=attention == "kernel"))  # eager on a CPU
        timed(m.graphs, "step")
    engine = Engine(
        m,
        None,
        prefill_token_budget=2048,
        skip_special_tokens=True,
        max_waiting=1 << 20,
        request_timeout_s=float("inf"),
        stream_interval_s=0.0,
        cancel_poll_s=0.1,
    )
    for name in ("_prefill", "_decode", "_accept", "_drop_cancelled", "_admit"):
        timed(engine, name)
    done = [0]

    def submit():
        engine.submit(
            Sequence(
                prompt=torch.randint(0, m.cfg.vocab_size, (128,)).tolist(),
                params=SamplingParams(max_new_tokens=128),
                on_output=on_output,
            )
        )

    def on_output(seq, tokens, lps, finished, reason):
        if finished:
            done[0] += 1
            submit()

    for _ in range(conc):
        submit()
    for _ in range(int(300 * SCALE)):  # warm-up: requests desynchronise
        engine.step()
    spent.clear()
    gen0, t0 = engine.stats.generated_tokens, time.perf_counter()
    n = max(5, int(600 * SCALE))
    for _ in range(n):
        engine.step()
    wall = time.perf_counter() - t0
    r = {
        "attention": attention,
        "streams": conc,
        "steps": n,
        "ms_per_step": round(wall / n * 1e3, 3),
        "output_tok_per_s": round((engine.stats.generated_tokens - gen0) / wall, 1),
        **{f"{k}_ms_per_step": round(v / n * 1e3, 3) for k, v in sorted(spent.items())},
    }
    eng_rows.append(r)
    print(json.dumps(r), flush=True)
results["engine"] = eng_rows
results["graph_options_default"] = asdict(GraphOptions())


# 4. what the default step's GPU time is made of: the decode body run eagerly (the kernels a graph replays,
# without its launch gaps) under torch.profiler at B=64, kv bucket 256; GPU time per kernel name per step
def kernel_table() -> None:
    from torch.profiler import ProfilerActivity, profile

    g = DecodeGraphs(m, capture=False, options=GraphOptions())
    for _ in range(3):
        g._run(64, 256)
    sync()
    STEPS = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            g._run(64, 256)
        sync()
    per = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            per.append({"kernel": e.key[:120], "calls_per_step": e.count / STEPS, "us_per_step": round(us / STEPS, 1)})
    per.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in per)
    results["kernels_b64"] = {"gpu_us_per_step": round(total, 1), "fused": g.fused, "top": per[:25]}
    print(f"kernel time per eager step, B=64: {total:.0f} us (fused: {g.fused})", flush=True)
    for r in per[:25]:
        print(
            f"  {r['us_per_step']:8.1f} us {100 * r['us_per_step'] / total:5.1f}% x{r['calls_per_step']:g} {r['kernel']}"
        )


if GPU and not os.environ.get("PROFILE_NO_KERNELS"):
    try:
        kernel_table()
    except Exception as e:  # noqa: BLE001 (the sections above are written out all the same)
        results["kernels_b64"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(results["kernels_b64"], flush=True)
json.dump(results, open(out_path, "w"), indent=2)
