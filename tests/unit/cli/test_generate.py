"""tools/generate.py (llmserve.cli.generate): writes a repository, --check passes on what it wrote and
fails with exit 1 naming the drifted file, and a spec error is exit 2 with the key in the message."""

from pathlib import Path

from llmserve.cli.generate import main
from llmserve.spec import ROOT

SPEC = str(ROOT / "specs" / "tiny.yaml")


def test_written_repository_checks_clean_and_drift_is_reported(tmp_path: Path, capsys):
    out = tmp_path / "repo"
    assert main(["--spec", SPEC, "--out", str(out)]) == 0
    assert main(["--spec", SPEC, "--check", "--out", str(out)]) == 0
    config = out / "preprocessing" / "config.pbtxt"
    config.write_text(config.read_text() + "\n# edited by hand\n")
    capsys.readouterr()
    assert main(["--spec", SPEC, "--check", "--out", str(out)]) == 1
    assert "preprocessing/config.pbtxt" in capsys.readouterr().err


def test_a_bad_spec_is_exit_2_naming_the_key(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "specs" / "tiny.yaml").read_text() + "\nnot_a_section: 1\n")
    assert main(["--spec", str(bad), "--check"]) == 2
    assert "not_a_section" in capsys.readouterr().err
