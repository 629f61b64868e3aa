#!/usr/bin/env python3
"""Triton kernels written directly with @triton.jit (not through
torch.compile), launched on PyTorch tensors: a vector add, a fused row
softmax and a tiled matmul (float16 with float32 accumulation, and float32
with IEEE products). Each result is checked against PyTorch's, and a
digest of every result is printed: tests/thirdparty/run runs this natively
and through tern and requires the same output.

Checks against PyTorch (different kernels, so only the add is exact):
  vector_add        bit for bit (one IEEE add per element either way)
  softmax           |triton - torch| <= 1e-6 + 1e-5 |torch| (Triton's exp
                    is exp2 of x*log2(e) in hardware, PyTorch's is expf)
  matmul_fp16       |triton - torch| <= 1e-2 + 2e-3 |torch|: one float16 ulp
                    (both sum in float32, in another order, then round to
                    float16, so a sum near a rounding boundary lands on
                    either side)
  matmul_fp32_ieee  |triton - torch| <= 1e-4 + 1e-4 |torch| (PyTorch with
                    TF32 off; K = 512 float32 products summed in another order)

usage: triton_kernels.py
"""
import sys
import time

import torch
import triton
import triton.language as tl
from torch_results import digest, within


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float('inf'))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                  IEEE: tl.constexpr):
    # Grouped ordering of the output tiles, as Triton's tutorial does (L2 reuse).
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * tiles_n)
    first_m = group * GROUP
    size_m = min(tiles_m - first_m, GROUP)
    pm = first_m + (pid % (GROUP * tiles_n)) % size_m
    pn = (pid % (GROUP * tiles_n)) // size_m
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        if IEEE:
            acc += tl.dot(a, b, input_precision='ieee')
        else:
            acc += tl.dot(a, b)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device('cuda')
    print('device', torch.cuda.get_device_name(0), 'triton', triton.__version__, flush=True)
    ok = True

    t0 = time.perf_counter()
    n = 98432                                   # not a multiple of the block
    x = torch.rand(n, device=dev)
    y = torch.rand(n, device=dev)
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    exact = torch.equal(out, x + y)
    if not exact:
        diff = int((out != x + y).sum())
        print('FAIL vector_add: %d of %d elements differ from torch x + y' % (diff, n), flush=True)
        ok = False
    digest('vector_add', out, 'equal to torch' if exact else 'DIFFERS')

    rows, cols = 1823, 781
    s = torch.randn(rows, cols, device=dev)
    sm = torch.empty_like(s)
    softmax_kernel[(rows,)](sm, s, s.stride(0), sm.stride(0), cols, BLOCK=triton.next_power_of_2(cols),
                            num_warps=8)
    note = within('softmax', sm, torch.softmax(s, dim=1), 1e-6, 1e-5)
    ok = ok and note is not None
    digest('softmax', sm, note or 'OUT OF TOLERANCE')

    def matmul(a, b, ieee):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=dev, dtype=a.dtype)
        BM, BN, BK = (64, 64, 32) if ieee else (128, 128, 32)
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, GROUP=8, IEEE=ieee,
                            num_warps=4, num_stages=3)
        return c

    a = torch.randn(512, 512, device=dev, dtype=torch.float16)
    b = torch.randn(512, 512, device=dev, dtype=torch.float16)
    c = matmul(a, b, False)
    note = within('matmul_fp16', c, torch.matmul(a, b), 1e-2, 2e-3)
    ok = ok and note is not None
    digest('matmul_fp16', c, note or 'OUT OF TOLERANCE')

    a32 = torch.randn(384, 512, device=dev)
    b32 = torch.randn(512, 320, device=dev)
    c32 = matmul(a32, b32, True)
    note = within('matmul_fp32_ieee', c32, torch.matmul(a32, b32), 1e-4, 1e-4)
    ok = ok and note is not None
    digest('matmul_fp32_ieee', c32, note or 'OUT OF TOLERANCE')

    # A second launch of each compiled kernel: the cached one, new data.
    x2 = torch.rand(n, device=dev)
    add_kernel[(triton.cdiv(n, 1024),)](x2, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    if not torch.equal(out, x2 + y):
        print('FAIL vector_add again: differs from torch x + y', flush=True)
        ok = False
    digest('vector_add_again', out, 'equal to torch' if torch.equal(out, x2 + y) else 'DIFFERS')
    print('time all %.3f s' % (time.perf_counter() - t0))
    if not ok:
        return 1
    print('PASS triton_kernels', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
