"""(a) Hugging Face static-batch `generate` on the same workload: B prompts of exactly IN tokens,
exactly OUT new tokens (min_new_tokens), greedy; default dynamic cache and cache_implementation="static"
(transformers compiles the decode step for a static cache: the first call is the warm-up)."""

import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM

from llmserve.bench.workload import make_prompts

ckpt, out_path = sys.argv[1], sys.argv[2]
default_bs = [int(x) for x in sys.argv[3].split(",") if x]
static_bs = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 and sys.argv[4] else []
IN, OUT = 128, 128
model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16).cuda().eval()
prompts = make_prompts(ckpt, max(default_bs + static_bs), IN)
results = []


def run(bs: int, cache: str | None, repeats: int = 2):
    ids = torch.tensor([p.ids for p in prompts[:bs]], device="cuda")
    kw = dict(
        max_new_tokens=OUT,
        min_new_tokens=OUT,
        do_sample=False,
        attention_mask=torch.ones_like(ids),
        pad_token_id=model.config.pad_token_id or 0,
    )
    if cache:
        kw["cache_implementation"] = cache
    t0 = time.perf_counter()
    model.generate(ids, **kw)  # warm-up (compiles for the static cache)
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    assert out.shape[1] == IN + OUT, out.shape
    best = min(times)
    r = {
        "cache": cache or "default",
        "batch": bs,
        "seconds": round(best, 4),
        "warmup_s": round(warm, 2),
        "output_tokens_per_s": round(bs * OUT / best, 1),
    }
    print(json.dumps(r), flush=True)
    results.append(r)


with torch.inference_mode():
    for bs in default_bs:
        run(bs, None)
    for bs in static_bs:
        try:
            run(bs, "static")
        except Exception as e:  # noqa: BLE001
            print(f"static cache batch {bs} failed: {type(e).__name__}: {e}", flush=True)
            results.append({"cache": "static", "batch": bs, "error": str(e)[:300]})
json.dump(results, open(out_path, "w"), indent=2)
