"""Write a model repository from a spec, or check that a committed one matches it. Picks the
renderer of each model: the Python models and the ensemble (python_models.py) and, for
engine.kind tensorrtllm, the C++ backend's config (trtllm/config.py)."""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from .. import contract as C
from ..pbtxt import HEADER, parse_pbtxt, to_pbtxt
from ..spec import ROOT, Spec
from ..spec.trtllm import engine_dir, xgrammar_tokenizer_info_path
from ..trtllm.build import write_xgrammar_tokenizer_info
from ..trtllm.config import tensorrtllm_engine
from . import python_models as render

KEEP = ".gitkeep"  # keeps the empty version folder of ensemble / C++ models in git


def repository(spec: Spec, repo_dir: Path, standin: bool = False) -> dict[str, tuple[mc.ModelConfig, str]]:
    """model name -> (config, source file in triton_models/ to copy as 1/model.py, or '').
    `standin`: the tensorrtllm layout with its C++ backend model served by the CI stand-in; every
    other model is exactly what production gets."""
    models = {
        C.PREPROCESSING: (render.preprocessing(spec, repo_dir), "preprocessing.py"),
        C.POSTPROCESSING: (render.postprocessing(spec, repo_dir), "postprocessing.py"),
        C.ENSEMBLE: (render.ensemble(spec), ""),
    }
    if spec.engine.kind == "torch":
        if standin:
            raise ValueError("the stand-in serves the tensorrtllm layout: use a spec with engine.kind tensorrtllm")
        models[C.ENGINE] = (render.torch_engine(spec, repo_dir), "torch_engine.py")
    else:  # the production path: the relay in front of Triton's C++ TensorRT-LLM backend (docs/tensorrtllm.md)
        models[C.ENGINE] = (render.relay(spec, repo_dir), "relay.py")
        backend = tensorrtllm_engine(spec, repo_dir)
        models[C.BACKEND] = (render.standin(backend, spec, repo_dir), "standin.py") if standin else (backend, "")
    if spec.serving.streaming and spec.serving.unary_twins:
        for target, ins, outs in (
            (C.ENSEMBLE, C.ENSEMBLE_INPUTS, C.ENSEMBLE_OUTPUTS),
            (C.ENGINE, C.ENGINE_INPUTS, C.ENGINE_OUTPUTS),
        ):
            models[target + C.UNARY_SUFFIX] = (render.unary_twin(spec, target, ins, outs), "unary.py")
    return models


def _render(spec: Spec, spec_name: str, repo_dir: Path, out: Path, standin: bool = False) -> list[Path]:
    """Write every model of the spec into `out`, with paths relative to `repo_dir` (where the
    repository will live). Each config is parsed back with the model_config protobuf first, so
    nothing Triton could not parse is ever written. Returns the files written."""
    written = []
    for name, (cfg, source) in repository(spec, repo_dir, standin).items():
        text = to_pbtxt(cfg, spec_name)
        parse_pbtxt(text)
        version_dir = out / name / "1"
        version_dir.mkdir(parents=True, exist_ok=True)
        (out / name / "config.pbtxt").write_text(text)
        written.append(out / name / "config.pbtxt")
        if source:
            shutil.copyfile(render.MODEL_SOURCES / source, version_dir / "model.py")
            written.append(version_dir / "model.py")
        else:
            (version_dir / KEEP).write_text("")
            written.append(version_dir / KEEP)
    return written


def _generated_models(root: Path) -> set[str]:
    """Model folders under `root` whose config this generator wrote (others are left alone)."""
    stamp = HEADER.split("{")[0]
    return {c.parent.name for c in root.glob("*/config.pbtxt") if c.read_text().startswith(stamp)}


def write_repository(spec: Spec, spec_name: str, out: Path, standin: bool = False) -> list[Path]:
    """Render every model into `out` (created if missing) and return the files written. Models an
    earlier run generated that the spec no longer has (say the twins after unary_twins: false) are
    removed, or tritonserver would still load them."""
    out = out.resolve()
    if standin and spec.checkpoint_path().exists() and not xgrammar_tokenizer_info_path(spec).exists():
        # The stand-in stands in for the engine build too: the C++ backend's config names the
        # tokenizer-info file the build writes (guided decoding), and a named file must exist.
        write_xgrammar_tokenizer_info(spec, engine_dir(spec))
    written = _render(spec, spec_name, out, out, standin)
    keep = {p.relative_to(out).parts[0] for p in written}
    for stale in _generated_models(out) - keep:
        shutil.rmtree(out / stale)
    return written


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def check_repository(spec: Spec, spec_name: str, committed: Path) -> list[str]:
    """Differences between `committed` and what the spec generates (empty list: no drift). The
    fresh copy is rendered as if it lived at `committed`, so relative paths compare equal."""
    committed = committed.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / committed.name
        _render(spec, spec_name, committed, fresh)
        have, want = _files(committed) if committed.exists() else set(), _files(fresh)
        problems = [f"missing: {p}" for p in sorted(want - have)]
        problems += [f"not generated by the spec: {p}" for p in sorted(have - want)]
        problems += [
            f"differs: {p}" for p in sorted(want & have) if not filecmp.cmp(fresh / p, committed / p, shallow=False)
        ]
        return problems


def spec_label(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
