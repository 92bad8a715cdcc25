"""Loading a spec: unknown keys and invalid values are errors that name the key."""

import pytest

from llmserve.spec import ROOT, SpecError, load_spec

DEFAULT = ROOT / "specs/default.yaml"


def test_unknown_key_is_an_error_that_names_it(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text(DEFAULT.read_text().replace("max_batch_size: 8", "max_batch_size: 8\n  max_batch: 4"))
    with pytest.raises(SpecError, match=r"engine\.max_batch"):
        load_spec(bad)


def test_invalid_value_names_the_key(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text(DEFAULT.read_text().replace("max_batch_size: 8", "max_batch_size: 0"))
    with pytest.raises(SpecError, match=r"engine\.max_batch_size"):
        load_spec(bad)
