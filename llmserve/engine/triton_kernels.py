"""The Triton kernels behind kernels.py. Imported only where Triton runs (kernels.available), at
first use: Triton fixes its interpreter mode (TRITON_INTERPRET, the CPU tests) when it is imported."""

import triton
import triton.language as tl


@triton.jit
def add_rms_norm(x_ptr, d_ptr, w_ptr, h_ptr, n, eps, HAS_D: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    if HAS_D:
        # The residual stream stays in the activation dtype, as `x = x + delta` keeps it.
        x = (x.to(tl.float32) + tl.load(d_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(x_ptr + row * n + cols, x, mask=mask)
    xf = x.to(tl.float32)
    normed = xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # Rounded to the activation dtype before the weight, as `w * norm(x).to(dtype)`.
    h = normed.to(x.dtype).to(tl.float32) * w
    tl.store(h_ptr + row * n + cols, h.to(x.dtype), mask=mask)


@triton.jit
def rope_kv(
    qkv_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    qkv_stride,
    slot_stride,
    head_stride,
    NH: tl.constexpr,
    NKV: tl.constexpr,
    HD: tl.constexpr,
):
    # One program per (row, head) of q and k; a k head also copies its v head.
    row, head = tl.program_id(0), tl.program_id(1)
    half = tl.arange(0, HD // 2)
    src = qkv_ptr + row * qkv_stride + head * HD
    x1 = tl.load(src + half).to(tl.float32)
    x2 = tl.load(src + HD // 2 + half).to(tl.float32)
    c1 = tl.load(cos_ptr + row * HD + half).to(tl.float32)
    c2 = tl.load(cos_ptr + row * HD + HD // 2 + half).to(tl.float32)
    s1 = tl.load(sin_ptr + row * HD + half).to(tl.float32)
    s2 = tl.load(sin_ptr + row * HD + HD // 2 + half).to(tl.float32)
    # rotate-half: [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin]
    o1 = (x1 * c1 - x2 * s1).to(q_ptr.dtype.element_ty)
    o2 = (x2 * c2 + x1 * s2).to(q_ptr.dtype.element_ty)
    if head < NH:
        dst = q_ptr + (row * NH + head) * HD
        tl.store(dst + half, o1)
        tl.store(dst + HD // 2 + half, o2)
    else:
        kv = head - NH
        # The cache is [slots, kv heads, positions, head_dim]; row r is slot r (cuda_graphs.py).
        at = row * slot_stride + kv * head_stride + tl.load(pos_ptr + row) * HD
        tl.store(k_ptr + at + half, o1)
        tl.store(k_ptr + at + HD // 2 + half, o2)
        full = tl.arange(0, HD)
        v = tl.load(qkv_ptr + row * qkv_stride + (NH + NKV + kv) * HD + full)
        tl.store(v_ptr + at + full, v)


@triton.jit
def silu_mul(gu_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row, block = tl.program_id(0), tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    g = tl.load(gu_ptr + row * 2 * n + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * 2 * n + n + cols, mask=mask, other=0.0).to(tl.float32)
    out = g * tl.sigmoid(g) * u
    tl.store(out_ptr + row * n + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def decode_attention(
    q_ptr,
    k_ptr,
    v_ptr,
    pos_ptr,
    o_ptr,
    kb,
    scale_log2,
    slot_stride,
    head_stride,
    NH: tl.constexpr,
    NKV: tl.constexpr,
    HD: tl.constexpr,
    G_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # One program per (row, kv head): the group's query heads against that head's keys 0..pos (an online
    # softmax over blocks of BLOCK_N keys). The group is padded to G_PAD rows, the least tl.dot takes.
    row, kv = tl.program_id(0), tl.program_id(1)
    G: tl.constexpr = NH // NKV
    g = tl.arange(0, G_PAD)
    d = tl.arange(0, HD)
    heads = (row * NH + kv * G + g[:, None]) * HD + d[None, :]
    q = tl.load(q_ptr + heads, mask=g[:, None] < G, other=0.0)
    # Keys at positions <= the row's own (its new key is already in the cache); padding rows sit at the
    # scratch position past every bucket and read the whole bucket, as SDPA's mask let them.
    n = tl.minimum(tl.load(pos_ptr + row) + 1, kb)
    base = row * slot_stride + kv * head_stride
    m_i = tl.full([G_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, HD], tl.float32)
    for start in range(0, n, BLOCK_N):
        offs = start + tl.arange(0, BLOCK_N)
        live = offs < n
        at = base + offs[:, None] * HD + d[None, :]
        k = tl.load(k_ptr + at, mask=live[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2  # [G_PAD, BLOCK_N], log2 units
        s = tl.where(live[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + at, mask=live[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(o_ptr + heads, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=g[:, None] < G)
