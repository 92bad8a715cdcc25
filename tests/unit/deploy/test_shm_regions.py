"""Shared-memory regions of the Python backend's stubs (deploy/tritonserver.py): every run of a server
gets a prefix of its own, and regions nobody maps any more (servers SIGKILLed before their cleanup
ran) are swept, while those of live processes and fresh ones stay."""

from __future__ import annotations

import os
import time

import pytest

from llmserve.deploy import tritonserver
from llmserve.deploy.tritonserver import TritonProcess, sweep_stale_regions


def test_every_run_has_its_own_prefix_under_the_ports(tmp_path):
    p = TritonProcess(tmp_path, http_port=18123, grpc_port=18124, metrics_port=18125)
    tags = []
    for _ in range(2):
        p._starting()
        tags.append(p.instance_tag)
        assert f"--backend-config=python,shm-region-prefix-name={p.instance_tag}_" in p.cmd
    assert tags[0] != tags[1]
    assert all(t.startswith(TritonProcess.tag_prefix(18123)) for t in tags)


def test_ended_removes_only_this_runs_regions(tmp_path, monkeypatch):
    monkeypatch.setattr(tritonserver, "SHM_DIR", tmp_path)
    p = TritonProcess(tmp_path, http_port=18123, grpc_port=18124, metrics_port=18125)
    p._starting()
    mine = tmp_path / f"{p.instance_tag}_0f3e"
    other = tmp_path / f"{TritonProcess.tag_prefix(18123)}beefcafe_0f3e"  # the next run's
    mine.write_bytes(b"x")
    other.write_bytes(b"x")
    p._ended()
    assert not mine.exists() and other.exists()


def test_sweep_removes_old_unmapped_regions_only(tmp_path, monkeypatch):
    monkeypatch.setattr(tritonserver, "SHM_DIR", tmp_path)
    old = time.time() - 3600
    stale, held, fresh, foreign = (tmp_path / n for n in ("llmserve1-a_1", "llmserve2-b_1", "llmserve3-c_1", "other_1"))
    for f in (stale, held, fresh, foreign):
        f.write_bytes(b"x")
    for f in (stale, held, foreign):
        os.utime(f, (old, old))
    with open(held, "rb"):  # a live process holds it: its server is alive
        removed = sweep_stale_regions()
    assert removed == [stale.name]
    assert held.exists() and fresh.exists() and foreign.exists() and not stale.exists()


def test_a_session_tag_marks_every_region_name(monkeypatch):
    monkeypatch.setenv(tritonserver.SHM_TAG_ENV, "t42")
    assert TritonProcess.tag_prefix(18123) == "llmservet42-18123-"
    monkeypatch.delenv(tritonserver.SHM_TAG_ENV)
    assert TritonProcess.tag_prefix(18123) == "llmserve18123-"
    for bad in ("42", "a-b", "a" * 40):
        monkeypatch.setenv(tritonserver.SHM_TAG_ENV, bad)
        with pytest.raises(ValueError, match=tritonserver.SHM_TAG_ENV):
            TritonProcess.tag_prefix(18123)


def test_the_reaper_is_told_this_runs_regions(tmp_path, monkeypatch):
    monkeypatch.setattr(tritonserver, "SHM_DIR", tmp_path)
    p = TritonProcess(tmp_path, http_port=18123, grpc_port=18124, metrics_port=18125)
    assert p.leftovers() is None  # not started: nothing to remove
    p._starting()
    assert p.leftovers() == f"{tmp_path}/{p.instance_tag}_"
