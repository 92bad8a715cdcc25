"""The benchmark's numbers: throughput, TTFT and inter-token latency as GenAI-Perf/AIPerf define them,
failed requests kept out of the latencies but counted, and ratios only where both targets ran."""

from llmserve.bench.report import ratios, summarize
from llmserve.bench.runner import RunResult
from llmserve.bench.targets import Record


def _record(start: float, token_times: list[float]) -> Record:
    r = Record(start=start)
    for t in token_times:
        r.mark(1, now=t)
    r.end = token_times[-1]
    return r


def test_summary_counts_tokens_over_the_wall_time_and_latencies_per_request():
    ok = [_record(0.0, [0.1, 0.2, 0.3]), _record(0.0, [0.3, 0.5, 0.7, 0.9])]
    failed = Record(start=0.0, error="server busy: full")
    s = summarize(RunResult(records=ok + [failed], started=0.0, ended=1.0))
    assert (s["requests"], s["completed"], s["errors"]) == (3, 2, 1)
    assert s["output_tokens"] == 7 and s["output_tokens_per_s"] == 7.0
    assert s["ttft_ms"]["p50"] == 200.0  # 100 ms and 300 ms
    assert s["itl_ms"]["mean"] == 150.0  # (0.3-0.1)/2 = 100 ms and (0.9-0.3)/3 = 200 ms
    assert s["error_examples"] == ["server busy: full"]


def test_an_empty_run_has_no_latencies_instead_of_failing():
    s = summarize(RunResult(records=[], started=0.0, ended=1.0))
    assert s["completed"] == 0 and s["ttft_ms"]["p50"] is None and s["mean_tokens_per_request"] == 0


def test_ratios_pair_runs_of_the_same_mode_and_load_only():
    def run(target, load, tps, ttft):
        return {
            "target": target,
            "mode": "concurrency",
            "load": load,
            "summary": {"output_tokens_per_s": tps, "ttft_ms": {"p50": ttft}},
        }

    runs = [run("ensemble", 8, 90.0, 30.0), run("engine", 8, 100.0, 20.0), run("ensemble", 16, 150.0, 40.0)]
    assert ratios(runs, "ensemble", "engine") == {"concurrency=8": {"throughput_ratio": 0.9, "ttft_p50_ratio": 1.5}}
