"""Spec -> configs of the Python-backend models (preprocessing, postprocessing, the torch engine,
the unary twins) and of the ensemble that chains them, as `ModelConfig` protobufs (llmserve.pbtxt)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from .. import contract as C
from ..pbtxt import dynamic_batching, io, params, rel
from ..pipeline.options import EngineOptions, PostprocessOptions, PreprocessOptions
from ..spec import Spec

MODEL_SOURCES = Path(__file__).resolve().parents[1] / "triton_models"


def _python_model(name: str, spec: Spec, inputs, outputs, *, instances: int, batching, decoupled: bool,
                  parameters: dict) -> mc.ModelConfig:
    cfg = mc.ModelConfig(
        name=name,
        backend="python",
        max_batch_size=spec.engine.max_batch_size,
        input=io(inputs, mc.ModelInput),
        output=io(outputs, mc.ModelOutput),
        instance_group=[mc.ModelInstanceGroup(count=instances, kind=mc.ModelInstanceGroup.KIND_CPU)],
        version_policy=mc.ModelVersionPolicy(latest=mc.ModelVersionPolicy.Latest(num_versions=1)),
        parameters=parameters,
    )
    if batching is not None:
        cfg.dynamic_batching.CopyFrom(dynamic_batching(batching))
    if decoupled:
        cfg.model_transaction_policy.decoupled = True
    return cfg


def preprocessing(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    opts = PreprocessOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    return _python_model(
        C.PREPROCESSING, spec, C.PREPROCESSING_INPUTS, C.PREPROCESSING_OUTPUTS,
        instances=spec.preprocessing.instances, batching=spec.preprocessing.dynamic_batching, decoupled=False,
        parameters=params(**opts.to_params()),
    )


def postprocessing(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    """One instance: no dynamic batching, so a step of a cancelled ensemble request reaches
    execute() and can stop its generation (pipeline/cancel_relay.py); one instance runs the chunks
    of a stream in order by itself. Several instances need dynamic batching with preserve_ordering
    for that order, and then Triton 2.51 drops a cancelled step before execute: the generation runs
    on until it ends or serving.request_timeout_s."""
    opts = PostprocessOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    pp = spec.postprocessing
    return _python_model(
        C.POSTPROCESSING, spec, C.POSTPROCESSING_INPUTS, C.POSTPROCESSING_OUTPUTS,
        instances=pp.instances, batching=pp.dynamic_batching if pp.instances > 1 else None, decoupled=False,
        parameters=params(**opts.to_params()),
    )


def torch_engine(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    opts = EngineOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    e = spec.engine
    return _python_model(
        C.ENGINE, spec, C.ENGINE_INPUTS, C.ENGINE_OUTPUTS,
        instances=e.instances, batching=e.queue, decoupled=spec.serving.streaming,
        parameters=params(engine="torch", **opts.to_params()),
    )


def engine_outputs(spec: Spec) -> list[C.Tensor]:
    if spec.engine.kind == "torch":
        return C.ENGINE_OUTPUTS
    return [t for t in C.ENGINE_OUTPUTS if t.name not in C.TORCH_ONLY_OUTPUTS]


def ensemble(spec: Spec) -> mc.ModelConfig:
    """Wires preprocessing -> tensorrt_llm -> postprocessing. Ensemble tensor names equal the model
    tensor names except the upstream renames in contract.ENSEMBLE_TO_ENGINE."""
    engine_inputs = {t.name for t in C.ENGINE_INPUTS}
    to_engine = {v: k for k, v in C.ENSEMBLE_TO_ENGINE.items()}  # engine input -> ensemble tensor
    pre_out = {t.name for t in C.PREPROCESSING_OUTPUTS}
    client = {t.name for t in C.ENSEMBLE_INPUTS}
    produced = {t.name for t in engine_outputs(spec)}

    def engine_source(name: str) -> str | None:
        src = to_engine.get(name, name)
        return src if (src in pre_out or src in client) else None

    steps = [
        mc.ModelEnsembling.Step(
            model_name=C.PREPROCESSING, model_version=-1,
            input_map={t.name: t.name for t in C.PREPROCESSING_INPUTS},
            output_map={t.name: t.name for t in C.PREPROCESSING_OUTPUTS},
        ),
        mc.ModelEnsembling.Step(
            model_name=C.ENGINE, model_version=-1,
            input_map={n: engine_source(n) for n in sorted(engine_inputs) if engine_source(n)},
            output_map={t.name: t.name for t in engine_outputs(spec)},
        ),
        mc.ModelEnsembling.Step(
            model_name=C.POSTPROCESSING, model_version=-1,
            input_map={t.name: t.name for t in C.POSTPROCESSING_INPUTS if t.name in produced},
            output_map={t.name: t.name for t in C.POSTPROCESSING_OUTPUTS},
        ),
    ]
    cfg = mc.ModelConfig(
        name=C.ENSEMBLE, platform="ensemble", max_batch_size=spec.engine.max_batch_size,
        input=io(C.ENSEMBLE_INPUTS, mc.ModelInput), output=io(C.ENSEMBLE_OUTPUTS, mc.ModelOutput),
    )
    cfg.ensemble_scheduling.step.extend(steps)
    return cfg


def unary_twin(spec: Spec, target: str, inputs, outputs) -> mc.ModelConfig:
    """Triton refuses unary infer on decoupled models and on ensembles containing one; this
    non-decoupled twin forwards to the decoupled model over BLS and returns one response."""
    # No reshape: the twin forwards tensors as it receives them, with the batch dimension.
    inputs = [dataclasses.replace(t, reshape_scalar=False) for t in inputs]
    return _python_model(
        target + C.UNARY_SUFFIX, spec, inputs, outputs,
        # The engine's queue bound: requests beyond it are refused at once ("server busy").
        instances=2, batching=spec.engine.queue, decoupled=False,  # 2: one batch waits on the next
        parameters=params(target_model=target),
    )
