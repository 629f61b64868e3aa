"""What triton_kernels.py and torchvision_ops.py print of a result: a
digest of its bytes (equal natively and through tern, bit for bit) and,
against a reference computed another way, the largest error or a FAIL
line naming the worst element with both values."""
import hashlib

import torch


def digest(name, t, note):
    host = t.detach().cpu().contiguous()
    raw = host.view(torch.uint8) if host.dtype.is_floating_point else host
    print('%-16s %s %s %s %s' % (name, str(host.dtype).replace('torch.', ''), tuple(host.shape),
                                 hashlib.sha256(raw.numpy().tobytes()).hexdigest()[:32], note), flush=True)


def within(name, got, want, atol, rtol, reference='torch'):
    """'max_abs_err E' when every |got - want| <= atol + rtol |want|, else
    None after a FAIL line."""
    got, want = got.detach().cpu().float(), want.detach().cpu().float()
    if got.shape != want.shape:
        print('FAIL %s: shape %s, %s %s' % (name, tuple(got.shape), reference, tuple(want.shape)), flush=True)
        return None
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    bad = int((err > bound).sum())
    if bad or not torch.isfinite(got).all():
        worst = int(torch.argmax(err - bound))
        print('FAIL %s: %d elements out of |err| <= %g + %g |%s|; worst at flat index %d: %r, %s %r'
              % (name, bad, atol, rtol, reference, worst, got.flatten()[worst].item(), reference,
                 want.flatten()[worst].item()), flush=True)
        return None
    return 'max_abs_err %.3e' % float(err.max()) if err.numel() else 'empty'
