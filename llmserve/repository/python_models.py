"""Spec -> configs of the Python-backend models (preprocessing, postprocessing, the torch engine, the
tensorrtllm layout's relay and its CI stand-in for the C++ backend, the unary twins) and of the
ensemble that chains them, as `ModelConfig` protobufs (llmserve.pbtxt)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from .. import contract as C
from ..pbtxt import dynamic_batching, io, params, rel
from ..pipeline.options import EngineOptions, PostprocessOptions, PreprocessOptions, RelayOptions
from ..spec import Spec
from ..trtllm.upstream import STANDIN_PREFIX

MODEL_SOURCES = Path(__file__).resolve().parents[1] / "triton_models"


def _python_model(
    name: str, spec: Spec, inputs, outputs, *, instances: int, batching, decoupled: bool, parameters: dict
) -> mc.ModelConfig:
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
        # Upstream's tensor names too, for callers of this model itself; the ensemble wires only ours.
        C.PREPROCESSING,
        spec,
        C.PREPROCESSING_INPUTS + C.PREPROCESSING_UPSTREAM_INPUTS,
        C.PREPROCESSING_OUTPUTS + C.PREPROCESSING_UPSTREAM_OUTPUTS,
        instances=spec.preprocessing.instances,
        batching=spec.preprocessing.dynamic_batching,
        decoupled=False,
        parameters=params(**opts.to_params()),
    )


def postprocessing(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    """One instance: no dynamic batching, so a step of a cancelled ensemble request reaches
    execute() and can stop its generation (pipeline/cancellation.py); one instance runs the chunks
    of a stream in order by itself. Several instances need dynamic batching with preserve_ordering
    for that order, and then Triton 2.51 drops a cancelled step before execute: the generation runs
    on until it ends or serving.request_timeout_s."""
    opts = PostprocessOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    pp = spec.postprocessing
    return _python_model(
        C.POSTPROCESSING,
        spec,
        C.POSTPROCESSING_INPUTS + C.POSTPROCESSING_UPSTREAM_INPUTS,
        C.POSTPROCESSING_OUTPUTS + C.POSTPROCESSING_UPSTREAM_OUTPUTS,
        instances=pp.instances,
        batching=pp.dynamic_batching if pp.instances > 1 else None,
        decoupled=False,
        parameters=params(**opts.to_params()),
    )


def torch_engine(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    opts = EngineOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    e = spec.engine
    return _python_model(
        C.ENGINE,
        spec,
        C.ENGINE_INPUTS,
        C.ENGINE_OUTPUTS,
        instances=e.instances,
        batching=e.queue,
        decoupled=spec.serving.streaming,
        parameters=params(engine="torch", **opts.to_params()),
    )


def relay(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    """tensorrtllm layout: `tensorrt_llm` is the token relay in front of the C++ backend model
    (pipeline/relay.py); same token-level contract as the torch engine, plus the `stop` input. A thread
    per request; engine.tensorrtllm.relay_instances processes (each its own GIL)."""
    opts = RelayOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    # No reshape: the relay forwards tensors as it receives them, with the batch dimension.
    inputs = [dataclasses.replace(t, reshape_scalar=False) for t in C.RELAY_INPUTS]
    return _python_model(
        C.ENGINE,
        spec,
        inputs,
        C.ENGINE_OUTPUTS,
        instances=spec.engine.tensorrtllm.relay_instances,
        batching=None,
        decoupled=spec.serving.streaming,
        parameters=params(**opts.to_params()),
    )


def standin(backend_cfg: mc.ModelConfig, spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    """CI: the C++ backend's config as generated for production, served by the Python stand-in
    (pipeline/standin.py): only `backend` changes, and parameters for the torch engine underneath are
    added under their own prefix (the C++ backend would ignore them)."""
    cfg = mc.ModelConfig()
    cfg.CopyFrom(backend_cfg)
    cfg.backend = "python"
    opts = EngineOptions.from_spec(spec, rel(spec.checkpoint_path(), repo_dir))
    for key, value in params(**opts.to_params()).items():
        cfg.parameters[STANDIN_PREFIX + key].CopyFrom(value)
    # The engine the spec would build: the C++ backend learns this from the engine's config.json
    # (build_config.gather_generation_logits), which CI has no engine for.
    built = params(gather_generation_logits=spec.engine.tensorrtllm.gather_generation_logits)
    cfg.parameters[STANDIN_PREFIX + "gather_generation_logits"].CopyFrom(built["gather_generation_logits"])
    return cfg


def ensemble(spec: Spec) -> mc.ModelConfig:
    """Wires preprocessing -> tensorrt_llm -> postprocessing. Ensemble tensor names equal the model
    tensor names except the upstream renames in contract.ENSEMBLE_TO_ENGINE."""
    engine_inputs = {t.name for t in C.ENGINE_INPUTS}
    to_engine = {v: k for k, v in C.ENSEMBLE_TO_ENGINE.items()}  # engine input -> ensemble tensor
    pre_out = {t.name for t in C.PREPROCESSING_OUTPUTS}
    client = {t.name for t in C.ENSEMBLE_INPUTS}
    inside = C.ENGINE_TENSOR_IN_ENSEMBLE  # engine output -> ensemble tensor, where they differ

    def engine_source(name: str) -> str | None:
        src = to_engine.get(name, name)
        return src if (src in pre_out or src in client) else None

    steps = [
        mc.ModelEnsembling.Step(
            model_name=C.PREPROCESSING,
            model_version=-1,
            input_map={t.name: t.name for t in C.PREPROCESSING_INPUTS},
            output_map={t.name: t.name for t in C.PREPROCESSING_OUTPUTS},
        ),
        mc.ModelEnsembling.Step(
            model_name=C.ENGINE,
            model_version=-1,
            input_map={n: engine_source(n) for n in sorted(engine_inputs) if engine_source(n)},
            output_map={t.name: inside.get(t.name, t.name) for t in C.ENGINE_OUTPUTS},
        ),
        mc.ModelEnsembling.Step(
            model_name=C.POSTPROCESSING,
            model_version=-1,
            input_map={t.name: inside.get(t.name, t.name) for t in C.POSTPROCESSING_INPUTS},
            output_map={t.name: t.name for t in C.POSTPROCESSING_OUTPUTS},
        ),
    ]
    cfg = mc.ModelConfig(
        name=C.ENSEMBLE,
        platform="ensemble",
        max_batch_size=spec.engine.max_batch_size,
        input=io(C.ENSEMBLE_INPUTS, mc.ModelInput),
        output=io(C.ENSEMBLE_OUTPUTS, mc.ModelOutput),
    )
    cfg.ensemble_scheduling.step.extend(steps)
    return cfg


def unary_twin(spec: Spec, target: str, inputs, outputs) -> mc.ModelConfig:
    """Triton refuses unary infer on decoupled models and on ensembles containing one; this
    non-decoupled twin forwards to the decoupled model over BLS and returns one response."""
    # No reshape: the twin forwards tensors as it receives them, with the batch dimension.
    inputs = [dataclasses.replace(t, reshape_scalar=False) for t in inputs]
    return _python_model(
        target + C.UNARY_SUFFIX,
        spec,
        inputs,
        outputs,
        # The engine's queue bound: requests beyond it are refused at once ("server busy").
        instances=2,
        batching=spec.engine.queue,
        decoupled=False,  # 2: one batch waits on the next
        parameters=params(target_model=target),
    )
