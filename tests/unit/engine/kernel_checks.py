"""The fused Triton kernels of the decode step (engine/kernels.py) against the torch ops they
replace, and the decode step built on them against the one without, on a CPU through Triton's
interpreter. Run by test_kernels.py in a process of their own, started with TRITON_INTERPRET=1:
Triton picks its interpreter when it is first imported, and in the test session something else
(xgrammar) has imported it before."""

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F

from llmserve.checkpoint import build_checkpoint
from llmserve.engine import kernels
from llmserve.engine.cuda_graphs import DecodeGraphs, GraphOptions
from llmserve.engine.layers import rms_norm_fused, rotate
from llmserve.engine.llama import LlamaModel
from llmserve.spec import ROOT, load_spec

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton, in its interpreter (TRITON_INTERPRET=1)",
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_is_the_residual_add_and_the_norm(dtype):
    torch.manual_seed(0)
    x, d, w = torch.randn(5, 96, dtype=dtype), torch.randn(5, 96, dtype=dtype), torch.randn(96, dtype=dtype)
    want_x = x + d
    want_h = rms_norm_fused(want_x, w, 1e-5)
    got_x = x.clone()
    got_h = kernels.add_rms_norm(got_x, d, w, 1e-5)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    # The residual stream is updated in place (equal to bf16 rounding: Triton's interpreter truncates
    # where the GPU rounds to nearest).
    assert torch.allclose(got_x.float(), want_x.float(), atol=tol, rtol=tol)
    assert torch.allclose(got_h.float(), want_h.float(), atol=tol, rtol=tol)
    alone = kernels.add_rms_norm(want_x.clone(), None, w, 1e-5)  # no delta: the norm only
    assert torch.allclose(alone.float(), want_h.float(), atol=tol, rtol=tol)


def test_rope_kv_rotates_q_and_k_and_writes_the_cache():
    torch.manual_seed(1)
    B, nh, nkv, hd, seq = 3, 4, 2, 16, 10
    qkv = torch.randn(B, (nh + 2 * nkv) * hd)
    cos, sin = torch.randn(B, hd), torch.randn(B, hd)
    positions = torch.tensor([7, 0, 9])
    k_cache, v_cache = torch.zeros(B + 1, nkv, seq, hd), torch.zeros(B + 1, nkv, seq, hd)
    q = kernels.rope_kv(qkv, cos, sin, positions, k_cache, v_cache, nh, nkv)
    heads = qkv.view(B, nh + 2 * nkv, hd)
    rot = rotate(heads[:, : nh + nkv], cos.unsqueeze(1), sin.unsqueeze(1))
    assert torch.allclose(q, rot[:, :nh], atol=1e-5)
    want_k, want_v = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    want_k[torch.arange(B), :, positions] = rot[:, nh:]
    want_v[torch.arange(B), :, positions] = heads[:, nh + nkv :]
    assert torch.allclose(k_cache, want_k, atol=1e-5)  # only (row, head, position) written; slot 3 untouched
    assert torch.equal(v_cache, want_v)


def test_rope_kv_refuses_a_cache_it_cannot_address():
    qkv, cos = torch.randn(2, 64), torch.randn(2, 16)
    cache = torch.zeros(2, 2, 16, 10).transpose(2, 3)  # positions not contiguous rows
    with pytest.raises(ValueError, match="contiguously"):
        kernels.rope_kv(qkv, cos, cos, torch.tensor([0, 1]), cache, cache, 2, 1)


def test_silu_mul():
    gu = torch.randn(3, 2 * 1500)  # more than one block per row
    gate, up = gu.chunk(2, dim=-1)
    assert torch.allclose(kernels.silu_mul(gu), F.silu(gate) * up, atol=1e-5)


def test_decode_attention_is_sdpa_over_each_rows_own_keys():
    # float32 only: Triton's interpreter multiplies bfloat16 tiles in tl.dot as raw bits (Triton 3.9);
    # scripts/h200/step_profile.py checks the kernel in bfloat16 against SDPA on the GPU.
    dtype = torch.float32
    torch.manual_seed(2)
    B, nh, nkv, hd, seq, kb = 4, 8, 2, 16, 200, 160
    q = torch.randn(B, nh, hd, dtype=dtype)
    k_cache, v_cache = torch.randn(B + 1, nkv, seq, hd, dtype=dtype), torch.randn(B + 1, nkv, seq, hd, dtype=dtype)
    # one key, several blocks of 64 with a partial last one, and a padding row at the scratch position
    # (past the bucket: it reads the whole bucket)
    positions = torch.tensor([0, 130, 63, seq - 1])
    got = kernels.decode_attention(q, k_cache, v_cache, positions, kb)
    visible = (torch.arange(kb).view(1, kb) <= positions.view(B, 1)).view(B, 1, 1, kb)
    want = F.scaled_dot_product_attention(
        q.view(B, nkv, nh // nkv, hd).float(),
        k_cache[:B, :, :kb].float(),
        v_cache[:B, :, :kb].float(),
        attn_mask=visible,
    ).view(B, nh, hd)
    tol = 1e-5
    assert torch.allclose(got.float(), want, atol=tol, rtol=tol)
    # row 0 sees only its one key: its output is that key's value, for every head of the kv head
    assert torch.allclose(got[0].float(), v_cache[0, :, 0].repeat_interleave(nh // nkv, 0).float(), atol=tol)


@pytest.mark.parametrize("attention_kernel", [True, False])
def test_decode_step_with_kernels_matches_without(attention_kernel):
    path = build_checkpoint(load_spec(ROOT / "specs/tiny.yaml"))
    torch.manual_seed(0)
    m = LlamaModel(path, torch.device("cpu"), torch.float32, max_slots=4, max_seq_len=40)
    m.k_cache.normal_(), m.v_cache.normal_()
    k0, v0 = m.k_cache.clone(), m.v_cache.clone()
    slots, tokens, positions = [0, 2, 3], [5, 17, 3], [4, 11, 0]
    plain = DecodeGraphs(m, capture=False, options=GraphOptions(kernels=False))
    assert not plain.fused
    want = plain.step(slots, tokens, positions, 12)
    want_logits, k_ref, v_ref = want.logits([0, 1, 2]).clone(), m.k_cache.clone(), m.v_cache.clone()
    m.k_cache.copy_(k0), m.v_cache.copy_(v0)
    fused = DecodeGraphs(m, capture=False, options=GraphOptions(kernels=True, attention_kernel=attention_kernel))
    assert fused.fused
    got = fused.step(slots, tokens, positions, 12)
    assert got.tokens == want.tokens
    assert torch.allclose(got.logits([0, 1, 2]), want_logits, atol=1e-4)
    assert torch.allclose(m.k_cache, k_ref, atol=1e-5) and torch.allclose(m.v_cache, v_ref, atol=1e-5)
