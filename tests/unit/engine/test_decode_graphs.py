"""The CUDA-graph decode path (slots as rows, scratch position, kv buckets) computes what the eager
forward computes; run eagerly here so it is checked on a CPU."""

import torch

from llmserve.checkpoint import build_checkpoint
from llmserve.engine.cuda_graphs import DecodeGraphs, batch_buckets, kv_buckets
from llmserve.engine.llama import LlamaModel
from llmserve.spec import ROOT, load_spec


def test_buckets():
    assert batch_buckets(128)[:5] == [1, 2, 4, 8, 16] and batch_buckets(128)[-1] == 128
    assert batch_buckets(3) == [1, 2, 3]
    assert kv_buckets(256) == [128, 256] and kv_buckets(1536) == [128, 256, 512, 1024, 1536]


def test_static_decode_matches_eager():
    path = build_checkpoint(load_spec(ROOT / "specs/tiny.yaml"))
    torch.manual_seed(0)
    m = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=6, max_seq_len=40)
    lens, slots = [5, 9, 3], torch.tensor([4, 1, 2])
    width = max(lens)
    m.forward(
        torch.randint(0, m.cfg.vocab_size, (3, width)),
        slots,
        torch.arange(width).expand(3, width),
        torch.tensor([n - 1 for n in lens]),
        width,
    )
    # slot 0 holds a prompt prefilled in the same step: the static step must not touch it
    m.forward(torch.randint(0, m.cfg.vocab_size, (1, 4)), torch.tensor([0]), torch.arange(4).view(1, 4), None, 4)
    k0, v0 = m.k_cache.clone(), m.v_cache.clone()
    tokens, positions = torch.randint(0, m.cfg.vocab_size, (3, 1)), torch.tensor([[n] for n in lens])
    ref = m.forward(tokens, slots, positions, None, width + 1)
    k_ref, v_ref = m.k_cache.clone(), m.v_cache.clone()
    m.k_cache.copy_(k0), m.v_cache.copy_(v0)
    out = DecodeGraphs(m, capture=False).decode(tokens, slots, positions, width + 1)
    assert torch.allclose(out, ref, atol=1e-4)
    end = m.max_seq_len  # everything but the scratch position is identical
    assert torch.allclose(m.k_cache[..., :end, :], k_ref[..., :end, :], atol=1e-5)
    assert torch.allclose(m.v_cache[..., :end, :], v_ref[..., :end, :], atol=1e-5)


def test_prefill_graph_body_matches_eager_prefill():
    """Padded to a (prompts, length) bucket, padding at the scratch position: same logits, same cache."""
    from llmserve.engine.prefill_graphs import PrefillGraphs, length_buckets

    assert length_buckets(256) == [16, 32, 64, 128, 256] and length_buckets(100) == [16, 32, 64, 100]
    path = build_checkpoint(load_spec(ROOT / "specs/tiny.yaml"))
    torch.manual_seed(0)
    m = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=6, max_seq_len=40)
    prompts, slots = [[5, 6, 7, 8, 9], [3] * 11, [4, 2, 9]], [4, 1, 2]
    width = max(map(len, prompts))
    tokens = torch.zeros((3, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = torch.tensor(p)
    ref = m.forward(
        tokens,
        torch.tensor(slots),
        torch.arange(width).expand(3, width),
        torch.tensor([len(p) - 1 for p in prompts]),
        width,
    )
    k_ref, v_ref = m.k_cache.clone(), m.v_cache.clone()
    m.k_cache.zero_(), m.v_cache.zero_()
    graphs = PrefillGraphs(m, max_input_len=20, capture=False)
    assert graphs.bucket(3, 11) == (4, 16)
    out = graphs.run(prompts, slots)
    assert torch.allclose(out, ref, atol=1e-4)
    for p, s in zip(prompts, slots):  # every real position holds the same keys and values
        assert torch.allclose(m.k_cache[:, s, :, : len(p)], k_ref[:, s, :, : len(p)], atol=1e-5)
        assert torch.allclose(m.v_cache[:, s, :, : len(p)], v_ref[:, s, :, : len(p)], atol=1e-5)
