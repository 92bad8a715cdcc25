"""tools/chaos.py's memory verdict (bench/chaos.py MemorySampler.report): per process, the median RSS
of the last quarter of its life against that of its 2nd quarter (the 1st is warm-up), only for
processes that lived long enough; the worst decides."""

from __future__ import annotations

from llmserve.bench.chaos import MemorySampler

MIB = 2**20


def sampler(series: dict[str, list[float]], period_s: float = 10.0) -> MemorySampler:
    s = MemorySampler(cluster=None, period_s=period_s)
    for i, (label, mib) in enumerate(series.items()):
        s.series[(1000 + i, 0.0)] = {
            "label": label,
            "pid": 1000 + i,
            "samples": [(k * period_s, m * MIB) for k, m in enumerate(mib)],
        }
    return s


def test_warm_up_is_ignored_and_flat_passes():
    # doubles in its first quarter (loading), then flat
    r = sampler({"triton0/tritonserver": [100, 150, 200] + [200] * 37}).report(min_life_s=300)
    assert r["processes_judged"] == 1 and r["worst"]["growth_pct"] == 0.0 and r["flat"] is True


def test_steady_growth_fails_and_the_worst_is_named():
    grow = [100 + k for k in range(40)]  # +1 MiB every 10 s
    r = sampler({"haproxy/haproxy": [50] * 40, "openai0/python": grow}).report(min_life_s=300)
    assert r["worst"]["process"] == "openai0/python" and r["worst"]["growth_pct"] > 5 and r["flat"] is False
    assert len(r["worst"]["trace_mib"]) == 10


def test_short_lived_processes_are_not_judged():
    r = sampler({"triton1/stub:tensorrt_llm_0_0": [100, 200, 300, 400, 500, 600, 700, 800]}).report(min_life_s=300)
    assert r["processes_judged"] == 0 and r["worst"] is None and r["flat"] is None
