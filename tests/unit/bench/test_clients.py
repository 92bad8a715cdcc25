"""--clients N: how a load is shared out over the client processes, what cannot be split, and a
client that fails ends the run with its reason instead of leaving the others waiting."""

import argparse

import pytest

from llmserve.bench.clients import Clients, Load, check, shares, split


def test_a_concurrency_is_shared_out_and_sums_to_the_whole():
    assert shares(10, 4) == [3, 3, 2, 2]
    assert [ld.value for ld, _ in split(Load("concurrency", 128), 8, 0)] == [16] * 8
    assert sum(ld.value for ld, _ in split(Load("concurrency", 7), 3, 0)) == 7


def test_a_rate_is_divided_and_so_is_its_cap():
    each = split(Load("rate", 6.0), 3, max_concurrency=5)
    assert [ld.value for ld, _ in each] == [2.0, 2.0, 2.0]
    assert [cap for _, cap in each] == [2, 2, 1]
    assert [cap for _, cap in split(Load("rate", 6.0), 3, 0)] == [0, 0, 0]  # 0: no cap


def test_loads_that_leave_a_client_without_a_stream_are_refused():
    assert check([Load("concurrency", 8)], 8, 0) is None
    assert "needs every --concurrency >= 8" in check([Load("concurrency", 64), Load("concurrency", 4)], 8, 0)
    assert "--max-concurrency" in check([Load("rate", 10.0)], 4, 2)
    assert check([Load("concurrency", 1)], 1, 0) is None
    assert "--requests >= 4" in check([Load("concurrency", 8)], 4, 0, requests=3)  # one client would never end
    assert check([Load("concurrency", 8)], 4, 0, requests=4) is None


def test_a_client_that_fails_ends_the_run_with_its_reason():
    args = argparse.Namespace(
        clients=2, duration=1.0, requests=None, request_timeout=5.0, max_concurrency=0, warmup=0,
        output_len=4, seed=0, log_level="warning", log_format="text",
    )  # fmt: skip
    with (
        pytest.raises(RuntimeError, match="unknown target 'nope'"),
        Clients(args, "nope", [], [Load("concurrency", 2)]) as group,
    ):
        group.run(0)
