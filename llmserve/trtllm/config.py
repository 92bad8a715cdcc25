"""The model for Triton's C++ TensorRT-LLM backend (engine.kind = tensorrtllm), `tensorrt_llm_cpp`,
behind the token relay `tensorrt_llm` (docs/tensorrtllm.md).

The token-level contract of the torch engine (contract.BACKEND_INPUTS / BACKEND_OUTPUTS: no
output_context_ids, plus the backend's `stop` input). Every config is checked against what the
backend of the pinned image reads (trtllm/upstream.py) before it is written. Build-time
limits come from the built engine's config.json when it exists, else from the spec's declared build.
Multi-instance follows what the backend really supports (docs/tensorrtllm.md): KIND_CPU count N plus
gpu_device_ids sets, orchestrator mode, and an explicit per-instance KV cap for shared GPUs.
Combinations that cannot work raise ValueError with the reason (tools/generate.py prints it).

    python -m llmserve.trtllm.config launch-env --repo model_repository   # used by docker/launch.sh
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from .. import contract as C
from ..checkpoint import package_dir
from ..pbtxt import dynamic_batching, io, params
from ..spec import ROOT, Spec, resolve
from ..spec.trtllm import engine_dir, max_num_tokens, xgrammar_tokenizer_info_path
from . import placement as P
from . import upstream as U

log = logging.getLogger(__name__)

EXECUTOR_WORKER = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
ORCHESTRATOR_PARAM = "llmserve_orchestrator_mode"
"""Ignored by the backend; read by docker/launch.sh to export TRTLLM_ORCHESTRATOR=1."""


def note(msg: str) -> None:
    """What the generator decided for tensorrt_llm and why (instances, KV cap, translated settings)."""
    log.info("tensorrt_llm: %s", msg)


# --- what exists on disk ---------------------------------------------------------------------------


def read_engine_config(path: Path) -> dict | None:
    f = path / "config.json"
    if not f.exists():
        return None
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the engine config {f}: {e}") from e
    if "build_config" not in cfg or "pretrained_config" not in cfg:
        raise ValueError(f"{f} is not a TensorRT-LLM engine config (no build_config / pretrained_config)")
    return cfg


def _gguf_shape(spec: Spec) -> P.ModelShape | None:
    src = spec.model.source
    try:
        path = package_dir(src.package) / src.file
    except FileNotFoundError:
        return None
    if not path.exists():
        return None
    from gguf import GGUFReader

    reader = GGUFReader(path)
    arch = str(reader.fields["general.architecture"].contents())

    def get(key, default=None):
        f = reader.fields.get(f"{arch}.{key}")
        return f.contents() if f is not None else default

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    vocab = get("vocab_size") or len(reader.fields["tokenizer.ggml.tokens"].data)
    names = {t.name for t in reader.tensors}
    return P.ModelShape(
        architecture={"llama": "LlamaForCausalLM"}.get(arch, arch),
        num_layers=int(get("block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", hidden // heads)),
        intermediate_size=int(get("feed_forward_length")),
        vocab_size=int(vocab),
        max_position_embeddings=int(get("context_length", 0)),
        tie_word_embeddings="output.weight" not in names,
        source=f"GGUF metadata of {path.name}",
    )


def hf_config(spec: Spec) -> tuple[dict, Path] | None:
    """The Hugging Face config.json of the spec's checkpoint (built, or the hf_checkpoint source)."""
    candidates = [spec.checkpoint_path() / "config.json"]
    if spec.model.source.kind == "hf_checkpoint":
        candidates.append(resolve(spec.model.source.path) / "config.json")
    for f in candidates:
        if f.exists():
            return json.loads(f.read_text()), f
    return None


def model_shape(spec: Spec, engine_cfg: dict | None) -> P.ModelShape | None:
    """Model dimensions: built engine > checkpoint config.json > GGUF metadata > unknown."""
    if engine_cfg is not None:
        pc = engine_cfg["pretrained_config"]
        try:
            return P.ModelShape.from_hf_config(
                {**pc, "architectures": [pc.get("architecture", "")]}, source="the engine's config.json"
            )
        except (KeyError, TypeError):
            pass
    found = hf_config(spec)
    if found is not None:
        return P.ModelShape.from_hf_config(found[0], source=_show(found[1]))
    if spec.model.source.kind == "gguf_package":
        return _gguf_shape(spec)
    return None


def _show(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def engine_weight_bytes(path: Path) -> int | None:
    ranks = sorted(path.glob("rank*.engine"))
    return max(f.stat().st_size for f in ranks) if ranks else None


# --- limits ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    max_beam_width: int
    tokens_per_block: int
    dtype: str
    source: str


def _plugin_flag(value) -> bool:
    return value not in (None, False, "disable", "disabled", "")


def limits(spec: Spec, engine_cfg: dict | None, where: Path) -> Limits:
    e, t = spec.engine, spec.engine.tensorrtllm
    declared = Limits(
        e.max_batch_size,
        e.max_input_len,
        e.max_seq_len,
        max_num_tokens(spec),
        t.max_beam_width,
        t.tokens_per_block,
        t.dtype,
        "the spec (no engine built yet)",
    )
    if engine_cfg is None:
        return declared
    bc, pc = engine_cfg["build_config"], engine_cfg["pretrained_config"]
    plugins = bc.get("plugin_config") or {}
    built = Limits(
        max_batch_size=int(bc.get("max_batch_size", declared.max_batch_size)),
        max_input_len=int(bc.get("max_input_len", declared.max_input_len)),
        max_seq_len=int(bc.get("max_seq_len", declared.max_seq_len)),
        max_num_tokens=int(bc.get("max_num_tokens") or declared.max_num_tokens),
        max_beam_width=int(bc.get("max_beam_width", declared.max_beam_width)),
        tokens_per_block=int(plugins.get("tokens_per_block") or declared.tokens_per_block),
        dtype=str(pc.get("dtype", declared.dtype)),
        source=f"the built engine {_show(where / 'config.json')}",
    )
    mapping = pc.get("mapping") or {}
    world = int(mapping.get("world_size") or int(mapping.get("tp_size", 1)) * int(mapping.get("pp_size", 1)))
    if world != t.world_size:
        raise ValueError(
            f"the engine in {where} was built for {world} GPU(s) per instance but the spec says "
            f"tp_size*pp_size = {t.world_size}; rebuild it (scripts/build_engine.py --force)"
        )
    # In-flight batching needs the GPT attention plugin, packed input and a paged KV cache.
    kv_type = str(bc.get("kv_cache_type", "")).lower()
    paged = "paged" in kv_type if kv_type else _plugin_flag(plugins.get("paged_kv_cache", True))
    missing = [
        name
        for name, ok in (
            ("gpt_attention_plugin", _plugin_flag(plugins.get("gpt_attention_plugin", "auto"))),
            ("remove_input_padding", _plugin_flag(plugins.get("remove_input_padding", True))),
            ("paged KV cache", paged),
        )
        if not ok
    ]
    if missing:
        raise ValueError(
            f"the engine in {where} was built without {', '.join(missing)}; in-flight batching "
            "(gpt_model_type inflight_fused_batching) needs all three. Rebuild with build_engine.py"
        )
    if (t.enable_kv_cache_reuse or t.enable_chunked_context) and not _plugin_flag(
        plugins.get("use_paged_context_fmha")
    ):
        raise ValueError(
            f"enable_kv_cache_reuse / enable_chunked_context need an engine built with "
            f"use_paged_context_fmha, and the engine in {where} was not; rebuild it or turn both off"
        )
    too_small = [
        f"{k} {getattr(built, k)} < spec {getattr(declared, k)}"
        for k in ("max_batch_size", "max_input_len", "max_seq_len")
        if getattr(built, k) < getattr(declared, k)
    ]
    if too_small:
        raise ValueError(
            f"the engine in {where} is smaller than the spec ({'; '.join(too_small)}): requests the "
            "spec admits would be rejected. Rebuild it (scripts/build_engine.py --force) or lower the spec"
        )
    bigger = [
        f"{k} {getattr(built, k)} > spec {getattr(declared, k)}"
        for k in ("max_batch_size", "max_input_len", "max_seq_len")
        if getattr(built, k) > getattr(declared, k)
    ]
    if bigger:
        note(f"the built engine is larger than the spec ({'; '.join(bigger)}); tensorrt_llm uses the engine's values")
    return built


# --- placement -------------------------------------------------------------------------------------


def placement(spec: Spec) -> P.Placement:
    e, t = spec.engine, spec.engine.tensorrtllm
    explicit = "instances" in e.model_fields_set
    explanation = []
    sets = None
    if t.gpu_device_ids is not None:
        sets = t.gpu_device_ids
        origin = "engine.tensorrtllm.gpu_device_ids"
    elif t.instance_group is not None:
        g = t.instance_group
        sets, why = P.translate_tutorial(g.count, g.kind, g.gpus, t.world_size, t.visible_gpus)
        explanation.append(why)
        origin = "engine.tensorrtllm.instance_group"
    if sets is not None:
        if explicit and e.instances != len(sets):
            raise ValueError(f"engine.instances is {e.instances} but {origin} describes {len(sets)} instance(s)")
        n = len(sets)
    else:
        n = e.instances
    result = P.plan(n, t.world_size, t.visible_gpus, sets)
    return P.Placement(result.sets, result.orchestrator, explanation + result.explanation)


def kv_cap(spec: Spec, lim: Limits, place: P.Placement, engine_cfg: dict | None, where: Path) -> int | None:
    """max_tokens_in_paged_kv_cache for each instance, or None to let the fraction decide alone."""
    t = spec.engine.tensorrtllm
    sharing = place.max_sharing
    floor = P.min_kv_tokens(lim.max_seq_len, lim.max_beam_width, lim.tokens_per_block)
    if sharing == 1:
        return t.max_tokens_in_paged_kv_cache
    shape = model_shape(spec, engine_cfg)
    if t.max_tokens_in_paged_kv_cache is not None:
        cap = t.max_tokens_in_paged_kv_cache
        if t.gpu_memory_gib is not None and shape is not None:
            per_token = P.kv_bytes_per_token(shape, lim.dtype, t.tp_size, t.pp_size)
            weights, _ = _weights(spec, shape, lim, where)
            limit, _ = P.kv_cap_tokens(
                gpu_memory_gib=t.gpu_memory_gib,
                weights_bytes=weights,
                reserved_gib=t.reserved_gib_per_instance,
                sharing=sharing,
                fraction=1.0,
                bytes_per_token=per_token,
                tokens_per_block=1,
            )
            if cap > limit:
                raise ValueError(
                    f"max_tokens_in_paged_kv_cache {cap} x {sharing} instances per GPU does not fit in "
                    f"{t.gpu_memory_gib:g} GiB (at most {limit} tokens each)"
                )
    else:
        if t.gpu_memory_gib is None:
            raise ValueError(
                f"{sharing} instances share a GPU: each needs an explicit KV cap, because "
                "kv_cache_free_gpu_mem_fraction applies to the memory free when each instance loads "
                "(the first would take most of it). Set engine.tensorrtllm.gpu_memory_gib (memory of "
                "one GPU) to derive it, or max_tokens_in_paged_kv_cache"
            )
        if shape is None:
            raise ValueError(
                "cannot derive the per-instance KV cap: the model shape is unknown (no engine, no "
                "checkpoint config.json). Run scripts/build_engine.py --spec ... first, or set "
                "engine.tensorrtllm.max_tokens_in_paged_kv_cache"
            )
        per_token = P.kv_bytes_per_token(shape, lim.dtype, t.tp_size, t.pp_size)
        weights, weights_from = _weights(spec, shape, lim, where)
        cap, how = P.kv_cap_tokens(
            gpu_memory_gib=t.gpu_memory_gib,
            weights_bytes=weights,
            reserved_gib=t.reserved_gib_per_instance,
            sharing=sharing,
            fraction=t.kv_cache_free_gpu_mem_fraction,
            bytes_per_token=per_token,
            tokens_per_block=lim.tokens_per_block,
        )
        note(
            f"{sharing} instances per GPU: max_tokens_in_paged_kv_cache = {how}; model shape from {shape.source}; "
            f"weights {weights_from}"
        )
    if cap < floor:
        # TensorRT-LLM itself would load and shrink the attention window to what fits
        # (adjustMaxAttentionWindow), so long requests would silently lose context: refuse instead.
        raise ValueError(
            f"max_tokens_in_paged_kv_cache {cap} cannot hold one sequence of max_seq_len "
            f"{lim.max_seq_len} (needs {floor} = beam {lim.max_beam_width} x blocks of "
            f"{lim.tokens_per_block}); TensorRT-LLM would shrink the attention window below "
            "max_seq_len to fit. Use fewer instances per GPU, a bigger GPU or a shorter max_seq_len"
        )
    if cap < lim.max_batch_size * lim.max_seq_len:
        note(
            f"the KV cap of {cap} tokens holds {cap // lim.max_seq_len} full-length sequences, fewer than "
            f"max_batch_size {lim.max_batch_size}; shorter requests still batch fully"
        )
    return cap


def _weights(spec: Spec, shape: P.ModelShape, lim: Limits, where: Path) -> tuple[int, str]:
    """Engine bytes on one GPU: measured rank files > the spec's weights_gib_per_gpu > estimate."""
    t = spec.engine.tensorrtllm
    measured = engine_weight_bytes(where)
    if measured is not None:
        return measured, "measured from the engine's rank files"
    if t.weights_gib_per_gpu is not None:
        return int(t.weights_gib_per_gpu * P.GIB), "engine.tensorrtllm.weights_gib_per_gpu"
    return P.weight_bytes_estimate(shape, lim.dtype, t.tp_size, t.pp_size), "estimated from the parameter count"


# --- the config ------------------------------------------------------------------------------------


def tensorrtllm_engine(spec: Spec, repo_dir: Path) -> mc.ModelConfig:
    e, t = spec.engine, spec.engine.tensorrtllm
    where = engine_dir(spec)
    engine_cfg = read_engine_config(where)
    lim = limits(spec, engine_cfg, where)
    gathers = engine_cfg is not None and bool(engine_cfg["build_config"].get("gather_generation_logits"))
    if t.gather_generation_logits and engine_cfg is not None and not gathers:
        # The relay would ask for generation_logits and every top log-probs request would fail in the executor.
        raise ValueError(
            f"engine.tensorrtllm.gather_generation_logits is true but the engine in {where} was built without "
            "--gather_generation_logits; rebuild it (scripts/build_engine.py --force)"
        )
    if lim.max_num_tokens < lim.max_input_len and not t.enable_chunked_context:
        raise ValueError(
            f"max_num_tokens {lim.max_num_tokens} < max_input_len {lim.max_input_len} without "
            "enable_chunked_context: the longest admitted prompt could never be scheduled"
        )
    place = placement(spec)
    for line in place.explanation:
        note(line)
    if place.instances > 1 or place.orchestrator:
        mode = (
            "orchestrator mode (TRTLLM_ORCHESTRATOR=1, set by docker/launch.sh)"
            if place.orchestrator
            else "leader mode"
        )
        note(
            f"{place.instances} instance(s): instance_group {{ kind: KIND_CPU count: {place.instances} }}, "
            f'gpu_device_ids "{place.gpu_device_ids}", {mode}'
        )
    cap = kv_cap(spec, lim, place, engine_cfg, where)

    window = t.max_attention_window_size
    cfg = mc.ModelConfig(
        name=C.BACKEND,
        backend="tensorrtllm",
        max_batch_size=lim.max_batch_size,
        input=io(C.BACKEND_INPUTS, mc.ModelInput),
        output=io(C.BACKEND_OUTPUTS, mc.ModelOutput),
        # The backend places instances by gpu_device_ids, never by KIND_GPU / gpus (docs/tensorrtllm.md).
        instance_group=[mc.ModelInstanceGroup(count=place.instances, kind=mc.ModelInstanceGroup.KIND_CPU)],
        version_policy=mc.ModelVersionPolicy(latest=mc.ModelVersionPolicy.Latest(num_versions=1)),
        parameters=params(
            gpt_model_type="inflight_fused_batching",
            # Absolute: the backend resolves it against the process cwd (std::filesystem::exists).
            gpt_model_path=str(where),
            # Guided decoding (guided_decoding_guide_type / _guide) with xgrammar, as upstream's
            # guided_decoding.md sets it up: the C++ backend reads the tokenizer-info file the build
            # writes into the engine directory (absolute, as gpt_model_path); tokenizer_dir is what
            # upstream's Python backend reads instead (the C++ one logs that it ignores it).
            tokenizer_dir=str(spec.checkpoint_path()),
            xgrammar_tokenizer_info_path=str(xgrammar_tokenizer_info_path(spec)),
            guided_decoding_backend="xgrammar",
            max_beam_width=lim.max_beam_width,
            FORCE_CPU_ONLY_INPUT_TENSORS="no",
            batch_scheduler_policy=t.batch_scheduler_policy,
            kv_cache_free_gpu_mem_fraction=t.kv_cache_free_gpu_mem_fraction,
            max_tokens_in_paged_kv_cache=cap,
            kv_cache_host_memory_bytes=t.kv_cache_host_memory_bytes,
            max_attention_window_size=",".join(map(str, window)) if window else None,
            enable_kv_cache_reuse=t.enable_kv_cache_reuse,
            enable_chunked_context=t.enable_chunked_context,
            exclude_input_in_output=spec.serving.exclude_input_in_output,
            normalize_log_probs=t.normalize_log_probs,
            decoding_mode=t.decoding_mode,
            cuda_graph_mode=t.cuda_graph_mode,
            cuda_graph_cache_size=t.cuda_graph_cache_size,
            recv_poll_period_ms=t.recv_poll_period_ms,
            cancellation_check_period_ms=t.cancellation_check_period_ms,
            stats_check_period_ms=t.stats_check_period_ms,
            iter_stats_max_iterations=t.iter_stats_max_iterations,
            request_stats_max_iterations=t.request_stats_max_iterations,
            gpu_device_ids=place.gpu_device_ids,
            executor_worker_path=EXECUTOR_WORKER,
            **{ORCHESTRATOR_PARAM: place.orchestrator},
        ),
    )
    cfg.dynamic_batching.CopyFrom(dynamic_batching(e.queue))
    # Always decoupled: the relay streams from it even for non-streaming clients (stop words end a
    # request early), and the backend refuses streaming=true unless the model is decoupled.
    cfg.model_transaction_policy.decoupled = True
    check_config(cfg)
    return cfg


def check_config(cfg: mc.ModelConfig) -> None:
    """Refuse a config the pinned backend would not load, or would read differently than meant."""
    problems = U.check_parameters({k: v.string_value for k, v in cfg.parameters.items()})
    problems += U.check_io(
        {i.name: (mc.DataType.Name(i.data_type)[5:], tuple(i.dims)) for i in cfg.input},
        {o.name: (mc.DataType.Name(o.data_type)[5:], tuple(o.dims)) for o in cfg.output},
    )
    if problems:
        raise ValueError(
            f"{cfg.name}: the TensorRT-LLM {U.TENSORRT_LLM_VERSION} backend would not accept this "
            "config (llmserve/trtllm/upstream.py):\n  " + "\n  ".join(problems)
        )


# --- launcher support ------------------------------------------------------------------------------


def launch_env(repo: Path) -> dict[str, str]:
    """Environment the launcher exports for a generated repository."""
    from google.protobuf import text_format

    f = repo / C.BACKEND / "config.pbtxt"
    if not f.exists():
        f = repo / C.ENGINE / "config.pbtxt"  # the torch layout
    if not f.exists():
        raise FileNotFoundError(f"{f} not found: generate the repository first (tools/generate.py)")
    cfg = text_format.Parse(f.read_text(), mc.ModelConfig())
    env = {"LLMSERVE_BACKEND": cfg.backend}
    if cfg.backend != "tensorrtllm":
        return env
    p = cfg.parameters
    engine = (repo / p["gpt_model_path"].string_value).resolve()
    env["LLMSERVE_ENGINE_DIR"] = str(engine)
    sets = p["gpu_device_ids"].string_value if "gpu_device_ids" in p else "0"
    env["LLMSERVE_GPUS"] = ",".join(sorted({g for s in sets.split(";") for g in s.split(",") if g}, key=int))
    if ORCHESTRATOR_PARAM in p and p[ORCHESTRATOR_PARAM].string_value == "true":
        env["TRTLLM_ORCHESTRATOR"] = "1"
    return env


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shlex

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    le = sub.add_parser("launch-env", help="print `export K=V` lines for docker/launch.sh")
    le.add_argument("--repo", required=True)
    args = ap.parse_args(argv)
    from ..logs import configure

    configure("info")  # the generator's notes on stderr; the exports are this CLI's output
    try:
        env = launch_env(Path(args.repo).resolve())
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for k, v in env.items():
        print(f"export {k}={shlex.quote(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
