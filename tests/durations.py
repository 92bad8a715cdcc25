"""How long the long tests run, in one place. The tests that soak, inject chaos or fuzz check the same
things at any length; a longer run only gives rarer faults more chances to show. Two profiles:

- `ci`: what `./.ci/run` runs (it sets LLMSERVE_TEST_PROFILE=ci), sized so the whole run stays well
  under CI's 30 minutes on a loaded 2-core machine;
- `full`: the longer versions, for a change to what these tests cover or before a release:
  `LLMSERVE_TEST_PROFILE=full ./scripts/test.sh`.

The profile is LLMSERVE_TEST_PROFILE; unset, it is `ci` when the CI environment variable is set (as CI
runners do) and `full` otherwise. An entry's own environment variable, when set, overrides both
(`LLMSERVE_SOAK_S=600 pytest tests/reliability/test_soak_short.py`). The ci profile also fuzzes a fixed
set of cases (`fuzz_derandomize`). The long versions are the tools themselves: `python tools/soak.py`
(30 minutes), `python tools/chaos.py --minutes 30`."""

from __future__ import annotations

import os
from dataclasses import dataclass

PROFILES = ("ci", "full")


@dataclass(frozen=True)
class Long:
    where: str  # the test that reads it
    unit: str
    ci: float
    full: float
    env: tuple[str, ...]  # overrides, the first one set wins


LONG = {
    "soak_s": Long("tests/reliability/test_soak_short.py", "s", ci=60, full=120, env=("LLMSERVE_SOAK_S",)),
    # At least one chaos event always runs, to its end (the replica is back UP), however short the time.
    "chaos_min": Long(
        "tests/ha/test_engine_health.py::test_chaos_soak_short", "min", ci=1, full=2, env=("LLMSERVE_CHAOS_MIN",)
    ),
    "fuzz_http_examples": Long(
        "tests/fuzz/test_fuzz_http.py", "cases", ci=400, full=1000, env=("LLMSERVE_FUZZ_EXAMPLES",)
    ),
    "fuzz_grpc_examples": Long(
        "tests/fuzz/test_fuzz_grpc.py",
        "cases",
        ci=200,
        full=400,
        env=("LLMSERVE_FUZZ_GRPC_EXAMPLES", "LLMSERVE_FUZZ_EXAMPLES"),
    ),
    "fuzz_token_examples": Long(
        "tests/fuzz/test_fuzz_token_level.py",
        "cases",
        ci=100,
        full=100,
        env=("LLMSERVE_FUZZ_TOKEN_EXAMPLES", "LLMSERVE_FUZZ_EXAMPLES"),
    ),
    # The relay under load (it deadlocked when it read the backend over decoupled BLS: docs/perf-gpu.md).
    "relay_load_requests": Long(
        "tests/e2e/test_stub_python.py::test_the_relay_under_load_on_python312",
        "requests",
        ci=600,
        full=3000,
        env=("LLMSERVE_RELAY_LOAD_REQUESTS",),
    ),
}


def profile() -> str:
    name = os.environ.get("LLMSERVE_TEST_PROFILE") or ("ci" if os.environ.get("CI") else "full")
    if name not in PROFILES:
        raise ValueError(f"LLMSERVE_TEST_PROFILE={name!r}: expected one of {', '.join(PROFILES)}")
    return name


def long(name: str) -> float:
    """The length of one long test under the current profile (or its own environment variable)."""
    entry = LONG[name]
    for var in entry.env:
        if os.environ.get(var):
            return float(os.environ[var])
    return entry.ci if profile() == "ci" else entry.full


def examples(name: str) -> int:
    return int(long(name))


def fuzz_derandomize() -> bool:
    """The ci profile fuzzes the same cases every run (hypothesis's derandomize: a seed fixed per
    test), so a submission never fails on a case no earlier run drew; the full profile draws new
    cases every run, to find what CI's fixed set does not reach."""
    return profile() == "ci"


def describe() -> str:
    """One line for pytest's header: what this run's long tests do."""
    fixed = "fixed" if fuzz_derandomize() else "new random"
    return (
        f"durations profile {profile()}: " + ", ".join(f"{n} {long(n):g}" for n in LONG) + f"; fuzz draws {fixed} cases"
    )
