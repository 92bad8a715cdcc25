"""The reaper (deploy/reaper.py): when its supervisor is gone, every registered process group is
killed and the files a group named (a tritonserver run's shared-memory regions) are removed, and no
one else's."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from llmserve.deploy.reaper import Reaper, parse, reap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, /proc")


def _gone(p: subprocess.Popen, wait_s: float) -> bool:
    try:
        p.wait(wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def _regions(tmp_path):
    mine = [tmp_path / "llmserve123-ab_1", tmp_path / "llmserve123-ab_2"]
    others = [tmp_path / "llmserve123-cd_1", tmp_path / "llmserve124-ab_1"]  # the next run's, another port's
    for f in mine + others:
        f.write_bytes(b"x")
    return mine, others


def test_parse_keeps_each_groups_file_prefix():
    groups = {}
    for line in ("+10 /dev/shm/llmserve8000-ab_", "+11", "-10", "+12 /dev/shm/x_", "bogus", "+x"):
        parse(line + "\n", groups)
    assert groups == {11: None, 12: "/dev/shm/x_"}


def test_reap_kills_the_group_then_removes_only_its_files(tmp_path):
    mine, others = _regions(tmp_path)
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    removed = reap({p.pid: str(tmp_path / "llmserve123-ab_")}, gone_wait_s=0.5)
    assert _gone(p, 10)
    assert sorted(removed) == sorted(f.name for f in mine)
    assert not any(f.exists() for f in mine) and all(f.exists() for f in others)


def test_a_supervisor_gone_leaves_neither_processes_nor_their_files(tmp_path):
    """Reaper.close() closes the pipe as a SIGKILLed supervisor's exit does."""
    mine, others = _regions(tmp_path)
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    reaper = Reaper().start()
    reaper.register(p.pid, str(tmp_path / "llmserve123-ab_"))
    reaper.close()
    assert _gone(p, 10)
    deadline = time.monotonic() + 10
    while any(f.exists() for f in mine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(f.exists() for f in mine) and all(f.exists() for f in others)
