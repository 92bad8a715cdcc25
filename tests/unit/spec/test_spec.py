"""Loading a spec: every committed spec loads, defaults, a loaded spec is frozen, and errors name the key."""

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


def _spec(tmp_path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_spec(path)


MINIMAL = """name: m
model:
  source: {kind: random_llama, tokenizer_from: build/checkpoints/x}
  checkpoint_dir: build/checkpoints/m
"""


@pytest.mark.parametrize("path", sorted((ROOT / "specs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_committed_spec_loads(path):
    assert load_spec(path).name


def test_defaults_of_a_minimal_spec(tmp_path):
    spec = _spec(tmp_path, MINIMAL)
    assert spec.engine.kind == "torch"
    assert spec.engine.max_seq_len == spec.engine.max_input_len + spec.engine.max_output_len
    assert spec.serving.streaming and spec.serving.unary_twins and not spec.model.trust_remote_code
    assert spec.postprocessing.dynamic_batching.preserve_ordering
    assert spec.checkpoint_path() == ROOT / "build/checkpoints/m"  # relative paths are relative to the root


def test_a_loaded_spec_cannot_be_changed(tmp_path):
    spec = _spec(tmp_path, MINIMAL)
    with pytest.raises(Exception, match="frozen"):
        spec.engine.max_batch_size = 2


@pytest.mark.parametrize(
    "text, key",
    [
        (MINIMAL.replace("tokenizer_from: build/checkpoints/x", "hidden_size: 8"), "model.source.tokenizer_from"),
        (MINIMAL + "engine: {max_input_len: 0}\n", "engine.max_input_len"),
        (MINIMAL + "serving: {request_timeout_s: 0}\n", "serving.request_timeout_s"),
        (MINIMAL + "engine: {kind: vllm}\n", "engine.kind"),
        (MINIMAL.replace("name: m\n", ""), "name"),
    ],
)
def test_errors_name_the_key(tmp_path, text, key):
    with pytest.raises(SpecError, match=key.replace(".", r"\.")):
        _spec(tmp_path, text)


def test_preferred_batch_sizes_within_the_engine_batch(tmp_path):
    with pytest.raises(SpecError, match="preferred_batch_sizes"):
        _spec(
            tmp_path,
            MINIMAL + "engine: {max_batch_size: 4}\npreprocessing: {dynamic_batching: {preferred_batch_sizes: [8]}}\n",
        )


def test_an_unreadable_spec_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match="cannot read spec"):
        _spec(tmp_path, "name: [unclosed\n")


def test_openai_workers_default_is_sized_to_the_machine():
    from llmserve.spec.openai import OpenAIFrontend

    o = OpenAIFrontend()
    assert [o.worker_count(cores=c) for c in (1, 2, 4, 8, 16, 64)] == [1, 1, 1, 2, 4, 8]
    assert o.worker_count(frontends=3, cores=16) == 1  # --replicas 3: the frontends share the cores
    assert o.worker_count(frontends=2, cores=64) == 4
    assert OpenAIFrontend(workers=6).worker_count(frontends=3, cores=2) == 6  # set: as set
    with pytest.raises(ValueError, match="workers"):
        OpenAIFrontend(workers=0)
