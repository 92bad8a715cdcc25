"""Pure placement and KV-cache arithmetic for the tensorrtllm backend (no I/O, no TensorRT-LLM).

Facts this encodes (docs/tensorrtllm.md):
  * The backend ignores instance_group KIND_GPU / gpus. N instances are `KIND_CPU count: N` plus
    `gpu_device_ids` with N ';'-separated sets; instance i takes set i.
  * A single tritonserver process (no mpirun) can drive engines spanning several GPUs, or instances
    on different GPUs, only in orchestrator mode (TRTLLM_ORCHESTRATOR=1).
  * kv_cache_free_gpu_mem_fraction applies to the memory free when each instance loads, so
    instances sharing a GPU must each be capped with max_tokens_in_paged_kv_cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GIB = 1 << 30
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class ModelShape:
    """What the KV and weight arithmetic needs from a checkpoint."""

    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    source: str = ""

    @classmethod
    def from_hf_config(cls, cfg: dict, source: str = "") -> ModelShape:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        arch = (cfg.get("architectures") or [cfg.get("architecture", "")])[0]
        return cls(
            architecture=arch,
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or cfg.get("head_size") or hidden // heads),
            intermediate_size=int(cfg.get("intermediate_size") or 4 * hidden),
            vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 0),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            source=source,
        )


def kv_heads_per_gpu(shape: ModelShape, tp: int) -> int:
    """TensorRT-LLM splits KV heads over TP ranks and replicates them when there are fewer KV
    heads than ranks."""
    return max(1, math.ceil(shape.num_kv_heads / tp))


def kv_bytes_per_token(shape: ModelShape, dtype: str, tp: int = 1, pp: int = 1) -> int:
    """KV cache bytes one token occupies on one GPU of an instance (K and V, every local layer)."""
    layers = math.ceil(shape.num_layers / pp)
    return 2 * layers * kv_heads_per_gpu(shape, tp) * shape.head_dim * DTYPE_BYTES[dtype]


def weight_bytes_estimate(shape: ModelShape, dtype: str, tp: int = 1, pp: int = 1) -> int:
    """Weights on the most loaded GPU of one instance, from the parameter count of a Llama-style
    decoder (attention, gated MLP, norms, embeddings; the embedding and LM head are not split)."""
    h, d = shape.hidden_size, shape.head_dim
    attn = h * shape.num_heads * d * 2 + h * shape.num_kv_heads * d * 2
    mlp = 3 * h * shape.intermediate_size
    per_layer = (attn + mlp) / tp + 2 * h
    embed = shape.vocab_size * h
    head = 0 if shape.tie_word_embeddings and pp == 1 else shape.vocab_size * h / tp
    params = math.ceil(shape.num_layers / pp) * per_layer + embed + head + h
    return int(params * DTYPE_BYTES[dtype])


@dataclass(frozen=True)
class Placement:
    sets: list[list[int]]
    orchestrator: bool
    explanation: list[str] = field(default_factory=list)

    @property
    def instances(self) -> int:
        return len(self.sets)

    @property
    def gpu_device_ids(self) -> str:
        return ";".join(",".join(str(g) for g in s) for s in self.sets)

    def sharing(self) -> dict[int, int]:
        """GPU -> number of instances that use it."""
        use: dict[int, int] = {}
        for s in self.sets:
            for g in s:
                use[g] = use.get(g, 0) + 1
        return use

    @property
    def max_sharing(self) -> int:
        return max(self.sharing().values())


def _check_sets(sets: list[list[int]], world: int, visible: int) -> None:
    for i, s in enumerate(sets):
        if len(s) != world:
            raise ValueError(
                f"GPU set {i} ({s}) has {len(s)} GPUs, but the engine needs tp_size*pp_size = {world} per instance"
            )
        if len(set(s)) != len(s):
            raise ValueError(f"GPU set {i} ({s}) names a GPU twice")
        bad = [g for g in s if g < 0 or g >= visible]
        if bad:
            raise ValueError(
                f"GPU set {i} ({s}) uses GPU {bad[0]}, but only GPUs 0..{visible - 1} are visible "
                f"(visible_gpus = {visible})"
            )
    distinct = {tuple(sorted(s)) for s in sets}
    for a in distinct:
        for b in distinct:
            if a < b and set(a) & set(b):
                raise ValueError(
                    f"GPU sets {list(a)} and {list(b)} overlap without being equal: the instances "
                    "would split those GPUs' memory unevenly and TP ranks would wait on each other. "
                    "Instances that share GPUs must use the same set"
                )


def _needs_orchestrator(sets: list[list[int]], world: int) -> bool:
    # One tritonserver process without mpirun drives ranks on several GPUs only by spawning
    # workers (orchestrator mode); a single-GPU engine in leader mode needs no MPI world at all.
    return world > 1 or len({tuple(s) for s in sets}) > 1


def plan(instances: int, world: int, visible: int, gpu_device_ids: list[list[int]] | None = None) -> Placement:
    """Place `instances` engines of `world` GPUs each on GPUs 0..visible-1."""
    if world < 1 or instances < 1 or visible < 1:
        raise ValueError("instances, tp_size*pp_size and visible_gpus must be positive")
    if world > visible:
        raise ValueError(f"each instance needs tp_size*pp_size = {world} GPUs but only {visible} are visible")
    notes: list[str] = []
    if gpu_device_ids is not None:
        sets = [list(s) for s in gpu_device_ids]
        if len(sets) != instances:
            raise ValueError(
                f"gpu_device_ids has {len(sets)} sets for {instances} instances; the backend needs "
                "exactly one set per instance"
            )
        _check_sets(sets, world, visible)
    else:
        groups = visible // world
        sets = [list(range((i % groups) * world, (i % groups) * world + world)) for i in range(instances)]
        if instances > groups:
            notes.append(f"{instances} instances on {groups} GPU set(s) of {world}: instances share GPUs")
    placement = Placement(sets, _needs_orchestrator(sets, world), notes)
    counts = set(placement.sharing().values())
    if len(counts) > 1:
        notes.append(
            f"GPUs are shared unevenly ({placement.sharing()}); max_tokens_in_paged_kv_cache is one value "
            f"for all instances, so it is sized for the most crowded GPU ({max(counts)} instances)"
        )
    return placement


def translate_tutorial(
    count: int, kind: str, gpus: list[int] | None, world: int, visible: int
) -> tuple[list[list[int]], str]:
    """Turn a tutorial `instance_group {count, kind, gpus}` into per-instance GPU sets, with the
    explanation the generator prints."""
    original = f"instance_group {{ count: {count} kind: {kind}" + (f" gpus: {gpus}" if gpus is not None else "") + " }"
    if kind == "KIND_GPU" or gpus is not None:
        listed = list(gpus) if gpus is not None else list(range(visible))
        if kind != "KIND_GPU":
            raise ValueError(f"{original}: `gpus` only has a meaning with KIND_GPU")
        if len(listed) % world:
            raise ValueError(f"{original}: {len(listed)} GPUs listed, not a multiple of tp_size*pp_size = {world}")
        groups = [listed[i : i + world] for i in range(0, len(listed), world)]
        sets = [g for g in groups for _ in range(count)]
        meaning = (
            f"Triton reads it as {count} instance(s) on each of GPU(s) {listed}"
            if world == 1
            else f"read as {count} instance(s) on each group of {world} GPUs in {listed}"
        )
    else:  # KIND_CPU / KIND_AUTO without gpus: count instances in total, placed automatically
        sets = plan(count, world, visible).sets
        meaning = f"{count} instance(s) in total"
    why = (
        f"{original}: {meaning}, but the tensorrtllm backend ignores KIND_GPU and `gpus` and would place "
        f"every instance by gpu_device_ids (or on the default GPU). Generated instead: instance_group "
        f"{{ kind: KIND_CPU count: {len(sets)} }} with gpu_device_ids "
        f'"{";".join(",".join(map(str, s)) for s in sets)}".'
    )
    return sets, why


def kv_cap_tokens(
    *,
    gpu_memory_gib: float,
    weights_bytes: int,
    reserved_gib: float,
    sharing: int,
    fraction: float,
    bytes_per_token: int,
    tokens_per_block: int,
) -> tuple[int, str]:
    """Per-instance KV cache cap (tokens) when `sharing` instances share one GPU.

    Each instance holds its weights and reserve; what is left is multiplied by the KV fraction and
    split evenly. The split is exactly what the fraction alone cannot guarantee: the first instance
    to load would take `fraction` of everything free."""
    total = gpu_memory_gib * GIB
    fixed = sharing * (weights_bytes + reserved_gib * GIB)
    free = total - fixed
    if free <= 0:
        raise ValueError(
            f"{sharing} instance(s) on one {gpu_memory_gib:g} GiB GPU need "
            f"{fixed / GIB:.2f} GiB for weights ({weights_bytes / GIB:.2f} GiB each) and reserve "
            f"({reserved_gib:g} GiB each) before any KV cache: use fewer instances per GPU"
        )
    per_instance = free * fraction / sharing
    tokens = int(per_instance // bytes_per_token) // tokens_per_block * tokens_per_block
    how = (
        f"({gpu_memory_gib:g} GiB - {sharing} x ({weights_bytes / GIB:.2f} GiB weights + {reserved_gib:g} GiB "
        f"reserve)) x {fraction:g} / {sharing} instances / {bytes_per_token} B per token = {tokens} tokens "
        f"(multiple of tokens_per_block {tokens_per_block})"
    )
    return tokens, how


def min_kv_tokens(max_seq_len: int, beam_width: int, tokens_per_block: int) -> int:
    """TensorRT-LLM refuses to load with a cache that cannot hold one sequence to completion."""
    return beam_width * math.ceil(max_seq_len / tokens_per_block) * tokens_per_block
