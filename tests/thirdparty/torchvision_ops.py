#!/usr/bin/env python3
"""torchvision's own CUDA code: the detection operators compiled into
torchvision's library (its fatbinary registered by its own copy of the
runtime, beside PyTorch's) and nvJPEG behind torchvision.io. Each result is
checked against torchvision's CPU implementation and a digest of every GPU
result is printed: tests/thirdparty/run runs this natively and through tern
and requires the same output.

Checks against the CPU (the same algorithms, other rounding):
  nms, batched_nms   the same kept indices, in any order among equal
                     scores (3000 uniform floats hold a tie about one run
                     in four, which the GPU's sort may put the other way:
                     the H100 did)
  roi_pool           equal (a maximum picks one input)
  roi_align          |gpu - cpu| <= 1e-4 + 1e-5 |cpu| (bilinear weights
                     at sampling points up to 45 pixels in, whose float32
                     rounding, 4e-6 of a pixel, moves a weight by that
                     much times the gap between neighbouring inputs, up to
                     about 4 for these; fused multiply-adds on the GPU)
  ps_roi_align       the same bound
  deform_conv2d      |gpu - cpu| <= 1e-4 + 1e-4 |cpu| (sums of 144 products
                     in another order; TF32 off)
  decode_jpeg        nvJPEG against libjpeg: mean |gpu - cpu| <= 2 levels of
                     255 (another IDCT and chroma upsampling)
  encode_jpeg        nvJPEG's file decoded on the CPU: mean |decoded - image|
                     <= 8 levels (quality 90 is lossy)

usage: torchvision_ops.py
"""
import sys
import time

import torch
import torchvision
from torchvision import io, ops

from torch_results import digest, within


def boxes(g, n, size):
    xy = torch.rand(n, 2, generator=g) * size
    wh = torch.rand(n, 2, generator=g) * size / 4 + 1
    return torch.cat([xy, xy + wh], dim=1)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device('cuda')
    g = torch.Generator().manual_seed(5)
    print('device', torch.cuda.get_device_name(0), 'torchvision', torchvision.__version__, flush=True)
    ok = True
    t0 = time.perf_counter()

    b = boxes(g, 3000, 512.0)
    scores = torch.rand(3000, generator=g)
    idx = torch.randint(0, 5, (3000,), generator=g)
    for name, gpu, cpu in (
            ('nms', lambda: ops.nms(b.to(dev), scores.to(dev), 0.5), lambda: ops.nms(b, scores, 0.5)),
            ('batched_nms', lambda: ops.batched_nms(b.to(dev), scores.to(dev), idx.to(dev), 0.3),
             lambda: ops.batched_nms(b, scores, idx, 0.3))):
        kept, want = gpu(), cpu()
        same = torch.equal(kept.cpu(), want) or (
            kept.numel() == want.numel() and torch.equal(scores[kept.cpu()], scores[want])
            and torch.equal(kept.cpu().sort().values, want.sort().values))
        if not same:
            print('FAIL %s: %d kept on the GPU, %d on the CPU, first difference at %s' % (
                name, kept.numel(), want.numel(),
                next((i for i, (p, q) in enumerate(zip(kept.cpu().tolist(), want.tolist())) if p != q),
                     min(kept.numel(), want.numel()))), flush=True)
            ok = False
        digest(name, kept, '%d kept, %s' % (kept.numel(), 'as on the CPU' if same else 'DIFFERS'))

    feat = torch.randn(2, 64, 50, 50, generator=g)
    rois = torch.cat([torch.randint(0, 2, (200, 1), generator=g).float(), boxes(g, 200, 180.0)], dim=1)
    pooled = ops.roi_pool(feat.to(dev), rois.to(dev), (7, 7), 0.25)
    same = torch.equal(pooled.cpu(), ops.roi_pool(feat, rois, (7, 7), 0.25))
    if not same:
        print('FAIL roi_pool: differs from the CPU', flush=True)
        ok = False
    digest('roi_pool', pooled, 'as on the CPU' if same else 'DIFFERS')
    for name, fn in (('roi_align', lambda f, r: ops.roi_align(f, r, (7, 7), 0.25, 2, aligned=True)),
                     ('ps_roi_align', lambda f, r: ops.ps_roi_align(f, r, (4, 4), 0.25, 2))):
        got = fn(feat.to(dev), rois.to(dev))
        note = within(name, got, fn(feat, rois), 1e-4, 1e-5, 'cpu')
        ok = ok and note is not None
        digest(name, got, note or 'OUT OF TOLERANCE')

    x = torch.randn(2, 16, 24, 24, generator=g)
    w = torch.randn(32, 16, 3, 3, generator=g) * 0.1
    offset = torch.randn(2, 2 * 9, 24, 24, generator=g)
    mask = torch.rand(2, 9, 24, 24, generator=g)
    got = ops.deform_conv2d(x.to(dev), offset.to(dev), w.to(dev), padding=(1, 1), mask=mask.to(dev))
    note = within('deform_conv2d', got, ops.deform_conv2d(x, offset, w, padding=(1, 1), mask=mask), 1e-4, 1e-4,
                  'cpu')
    ok = ok and note is not None
    digest('deform_conv2d', got, note or 'OUT OF TOLERANCE')

    # A smooth picture with some texture, as a JPEG codec expects.
    yy, xx = torch.meshgrid(torch.arange(480.0), torch.arange(640.0), indexing='ij')
    img = torch.stack([xx / 640 * 255, yy / 480 * 255, (xx + yy) % 256]) + torch.rand(3, 480, 640, generator=g) * 24
    img = img.clamp(0, 255).to(torch.uint8)
    data = io.encode_jpeg(img, quality=90)
    on_gpu = io.decode_jpeg(data, device=dev)
    diff = float((on_gpu.cpu().float() - io.decode_jpeg(data).float()).abs().mean())
    if diff > 2:
        print('FAIL decode_jpeg: nvJPEG differs from libjpeg by %.2f levels on average' % diff, flush=True)
        ok = False
    digest('decode_jpeg', on_gpu, 'mean_abs_vs_cpu %.3f' % diff)
    encoded = io.encode_jpeg(img.to(dev), quality=90)
    back = io.decode_jpeg(encoded.cpu())
    diff = float((back.float() - img.float()).abs().mean())
    if diff > 8:
        print('FAIL encode_jpeg: nvJPEG\'s file decodes %.2f levels away from the image on average' % diff,
              flush=True)
        ok = False
    digest('encode_jpeg', encoded, '%d bytes, mean_abs_vs_image %.3f' % (encoded.numel(), diff))
    torch.cuda.synchronize()
    print('time all %.3f s' % (time.perf_counter() - t0))
    if not ok:
        return 1
    print('PASS torchvision_ops', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
