"""Placement, orchestrator mode and KV-cap arithmetic for the tensorrtllm backend (pure functions)."""

import itertools

import pytest

from llmserve.trtllm import placement as P

SMOLLM2 = P.ModelShape(
    architecture="LlamaForCausalLM",
    num_layers=30,
    hidden_size=576,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    intermediate_size=1536,
    vocab_size=49152,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
)
LLAMA_1B = P.ModelShape(
    architecture="LlamaForCausalLM",
    num_layers=16,
    hidden_size=2048,
    num_heads=32,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=8192,
    vocab_size=128256,
    max_position_embeddings=131072,
    tie_word_embeddings=True,
)


@pytest.mark.parametrize(
    "visible,instances,world",
    [(v, n, w) for v, n, w in itertools.product(range(1, 9), range(1, 5), (1, 2, 4, 8)) if w <= v],
)
def test_auto_placement_grid(visible, instances, world):
    p = P.plan(instances, world, visible)
    assert p.instances == instances and len(p.gpu_device_ids.split(";")) == instances
    for s in p.sets:
        assert len(s) == world and len(set(s)) == world and all(0 <= g < visible for g in s)
    distinct = {tuple(s) for s in p.sets}
    for a, b in itertools.combinations(distinct, 2):  # identical or disjoint, never half-overlapping
        assert not set(a) & set(b)
    # A single tritonserver drives several GPUs (TP ranks or different instances) only as orchestrator.
    assert p.orchestrator == (world > 1 or len(distinct) > 1)
    groups = visible // world
    # Instances spread before they share: no GPU carries more than ceil(instances / groups).
    assert p.max_sharing == -(-instances // groups)
    if instances <= groups:
        assert p.max_sharing == 1


@pytest.mark.parametrize("visible,world", [(1, 2), (2, 4), (3, 4), (7, 8)])
def test_refuses_engine_wider_than_host(visible, world):
    with pytest.raises(ValueError, match="visible"):
        P.plan(1, world, visible)


def test_gpu_device_ids_rendering():
    assert P.plan(2, 1, 1).gpu_device_ids == "0;0"
    assert P.plan(2, 1, 2).gpu_device_ids == "0;1"
    assert P.plan(2, 2, 4).gpu_device_ids == "0,1;2,3"
    assert P.plan(4, 2, 4).gpu_device_ids == "0,1;2,3;0,1;2,3"
    assert P.plan(1, 8, 8).gpu_device_ids == "0,1,2,3,4,5,6,7"


def test_leader_mode_only_for_single_gpu_engines_on_one_gpu():
    assert not P.plan(1, 1, 1).orchestrator
    assert not P.plan(3, 1, 1).orchestrator
    assert not P.plan(2, 1, 4, [[2], [2]]).orchestrator
    assert P.plan(2, 1, 2).orchestrator
    assert P.plan(1, 2, 2).orchestrator


@pytest.mark.parametrize(
    "sets,msg",
    [
        ([[0]], "2 instances"),  # one set per instance
        ([[0], [0, 1]], "has 2 GPUs"),  # wrong set size
        ([[0], [4]], "only GPUs 0..3"),  # GPU not visible
        ([[0, 0]], "twice"),
    ],
)
def test_explicit_sets_refused(sets, msg):
    world = 2 if sets == [[0, 0]] else 1
    n = 2 if len(sets) == 2 or sets == [[0]] else 1
    with pytest.raises(ValueError, match=msg):
        P.plan(n, world, 4, sets)


def test_half_overlapping_sets_refused():
    with pytest.raises(ValueError, match="overlap"):
        P.plan(2, 2, 4, [[0, 1], [1, 2]])
    assert P.plan(2, 2, 4, [[0, 1], [0, 1]]).max_sharing == 2  # identical sets may share


def test_uneven_sharing_is_sized_for_the_most_crowded_gpu():
    p = P.plan(3, 1, 2)
    assert p.sets == [[0], [1], [0]] and p.max_sharing == 2
    assert any("unevenly" in line for line in p.explanation)


# --- tutorial-style instance_group --------------------------------------------------------------


@pytest.mark.parametrize(
    "count,kind,gpus,world,visible,expected",
    [
        (2, "KIND_GPU", [0], 1, 1, [[0], [0]]),
        (1, "KIND_GPU", [0, 1], 1, 2, [[0], [1]]),
        (2, "KIND_GPU", [1], 1, 2, [[1], [1]]),
        (2, "KIND_GPU", None, 1, 2, [[0], [0], [1], [1]]),  # no gpus: every visible GPU
        (1, "KIND_GPU", [0, 1, 2, 3], 2, 4, [[0, 1], [2, 3]]),
        (3, "KIND_CPU", None, 1, 2, [[0], [1], [0]]),
    ],
)
def test_translate_tutorial(count, kind, gpus, world, visible, expected):
    sets, why = P.translate_tutorial(count, kind, gpus, world, visible)
    assert sets == expected
    assert "ignores KIND_GPU" in why and f"count: {len(expected)}" in why
    assert P.plan(len(sets), world, visible, sets).sets == expected


def test_translate_tutorial_refusals():
    with pytest.raises(ValueError, match="not a multiple"):
        P.translate_tutorial(1, "KIND_GPU", [0, 1, 2], 2, 4)
    with pytest.raises(ValueError, match="only has a meaning with KIND_GPU"):
        P.translate_tutorial(1, "KIND_CPU", [0], 1, 1)


# --- KV arithmetic ----------------------------------------------------------------------------------


def test_kv_bytes_per_token():
    assert P.kv_bytes_per_token(SMOLLM2, "float16") == 2 * 30 * 3 * 64 * 2
    # TP splits KV heads; fewer KV heads than ranks are replicated, not split further.
    assert P.kv_bytes_per_token(LLAMA_1B, "bfloat16", tp=2) == 2 * 16 * 4 * 64 * 2
    assert P.kv_bytes_per_token(SMOLLM2, "float16", tp=4) == 2 * 30 * 1 * 64 * 2
    assert P.kv_bytes_per_token(LLAMA_1B, "float16", pp=2) == 2 * 8 * 8 * 64 * 2


def test_weight_estimate_close_to_parameter_count():
    # SmolLM2-135M: 134.5 M parameters, tied embeddings.
    assert abs(P.weight_bytes_estimate(SMOLLM2, "float16") / 2 - 134.5e6) < 2e6
    assert P.weight_bytes_estimate(LLAMA_1B, "bfloat16", tp=2) < P.weight_bytes_estimate(LLAMA_1B, "bfloat16")


@pytest.mark.parametrize("gpu_gib", [16, 24, 40, 80, 141])
@pytest.mark.parametrize("shape,tp", [(SMOLLM2, 1), (LLAMA_1B, 1), (LLAMA_1B, 2)])
def test_kv_cap_fits_and_shrinks_with_sharing(gpu_gib, shape, tp):
    per_token = P.kv_bytes_per_token(shape, "float16", tp)
    weights = P.weight_bytes_estimate(shape, "float16", tp)
    caps = []
    for sharing in range(1, 5):
        if sharing * (weights + 2.0 * P.GIB) >= gpu_gib * P.GIB:
            with pytest.raises(ValueError, match="before any KV cache"):
                P.kv_cap_tokens(
                    gpu_memory_gib=gpu_gib,
                    weights_bytes=weights,
                    reserved_gib=2.0,
                    sharing=sharing,
                    fraction=0.9,
                    bytes_per_token=per_token,
                    tokens_per_block=32,
                )
            continue
        cap, how = P.kv_cap_tokens(
            gpu_memory_gib=gpu_gib,
            weights_bytes=weights,
            reserved_gib=2.0,
            sharing=sharing,
            fraction=0.9,
            bytes_per_token=per_token,
            tokens_per_block=32,
        )
        assert cap % 32 == 0 and cap > 0 and str(cap) in how
        # Every instance's weights, reserve and capped cache fit on the GPU together.
        assert sharing * (weights + 2.0 * P.GIB + cap * per_token) <= gpu_gib * P.GIB
        caps.append(cap)
    assert caps == sorted(caps, reverse=True) and len(caps) >= 2 and caps[0] > caps[-1]


def test_kv_cap_refuses_when_weights_do_not_fit():
    with pytest.raises(ValueError, match="fewer instances per GPU"):
        P.kv_cap_tokens(
            gpu_memory_gib=16,
            weights_bytes=7 * P.GIB,
            reserved_gib=2,
            sharing=2,
            fraction=0.9,
            bytes_per_token=1000,
            tokens_per_block=32,
        )


def test_min_kv_tokens():
    assert P.min_kv_tokens(3072, 1, 32) == 3072
    assert P.min_kv_tokens(3000, 1, 128) == 3072
    assert P.min_kv_tokens(100, 2, 64) == 256


def test_shape_from_hf_config_defaults():
    s = P.ModelShape.from_hf_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "num_attention_heads": 8,
            "hidden_size": 256,
            "num_hidden_layers": 2,
            "vocab_size": 1000,
        }
    )
    assert s.num_kv_heads == 8 and s.head_dim == 32 and s.intermediate_size == 1024
