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
