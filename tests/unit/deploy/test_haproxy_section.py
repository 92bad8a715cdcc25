"""HAProxy's `openai` frontend: rendered from the spec, accepted by `haproxy -c`, /v1 and /health only."""

from __future__ import annotations

import shutil

import pytest

from llmserve.deploy.haproxy import check_config, local_backends, render
from llmserve.spec import ROOT, load_spec


def test_openai_frontend_is_rendered_and_valid(tmp_path):
    spec = load_spec(ROOT / "specs" / "default.yaml")
    text = render(
        spec,
        local_backends(spec, 2),
        stats_socket="",
        openai=[("openai0", "127.0.0.1", 19000), ("openai1", "127.0.0.1", 19001)],
    )
    assert f"bind {spec.ha.bind}:{spec.openai.port}" in text
    assert "option httpchk GET /health" in text and "server openai1 127.0.0.1:19001 check" in text
    assert "if !openai_api !openai_health" in text
    assert "frontend openai" not in render(spec, local_backends(spec, 2), stats_socket="")
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh --haproxy)")
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    check_config(cfg)
