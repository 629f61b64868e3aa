#!/usr/bin/env python3
"""A stand-in for train.py without PyTorch, for running the PyTorch tests'
plumbing where there is no PyTorch (tests/pytorch/migrate on the sim, in
the migrate suite): the same arguments and the same output ("step N loss
X" per step, the median step time, PASS), a "training" of driver calls
through ctypes (libcuda.so.1: the shim when LD_LIBRARY_PATH says so).

Its state lives in device memory only: each step reads the buffer back,
prints a digest of it as the loss and writes the next state derived from
it, half of it incompressible (SHAKE-256 output) and half a repeated
pattern (what zstd shrinks), so a lost or stale byte shows in every later
loss.

usage: fake_train.py MODEL [--steps N] [--graphs] [--expandable] [--mark STEP FILE] [--pause S]
  (MODEL, --graphs and --expandable are taken and ignored)
"""
import argparse
import ctypes
import hashlib
import statistics
import sys
import time

STATE_BYTES = 8 << 20


def check(rc, what):
    if rc != 0:
        print('FAIL %s: CUresult %d' % (what, rc), file=sys.stderr, flush=True)
        sys.exit(1)


def next_state(digest, i):
    noise = hashlib.shake_256(digest + i.to_bytes(4, 'little')).digest(STATE_BYTES // 2)
    pattern = (digest[:16] * (STATE_BYTES // 32))[:STATE_BYTES // 2]
    return noise + pattern


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model')
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--graphs', action='store_true')
    ap.add_argument('--expandable', action='store_true')
    ap.add_argument('--mark', nargs=2, metavar=('STEP', 'FILE'))
    ap.add_argument('--pause', type=float, default=0.1)
    a = ap.parse_args()
    cu = ctypes.CDLL('libcuda.so.1')
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    check(cu.cuInit(0), 'cuInit')
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), 'cuDeviceGet')
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), 'cuDevicePrimaryCtxRetain')
    check(cu.cuCtxSetCurrent(ctx), 'cuCtxSetCurrent')
    check(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(STATE_BYTES)), 'cuMemAlloc')
    buf = ctypes.create_string_buffer(next_state(b'fake-train-seed', 0), STATE_BYTES)
    check(cu.cuMemcpyHtoD_v2(ptr, buf, ctypes.c_size_t(STATE_BYTES)), 'cuMemcpyHtoD')
    print('device fake count 1', flush=True)
    times = []
    for i in range(a.steps):
        t0 = time.perf_counter()
        check(cu.cuMemcpyDtoH_v2(buf, ptr, ctypes.c_size_t(STATE_BYTES)), 'cuMemcpyDtoH')
        digest = hashlib.sha256(buf.raw).digest()
        ctypes.memmove(buf, next_state(digest, i + 1), STATE_BYTES)
        check(cu.cuMemcpyHtoD_v2(ptr, buf, ctypes.c_size_t(STATE_BYTES)), 'cuMemcpyHtoD')
        times.append(time.perf_counter() - t0)
        print('step %d loss %s' % (i, digest[:8].hex()), flush=True)
        if a.mark and i >= int(a.mark[0]):
            if i == int(a.mark[0]):
                open(a.mark[1], 'w').close()
            time.sleep(a.pause)
    print('median step %.3f ms' % (statistics.median(times[len(times) // 3:]) * 1e3))
    print('PASS train %s' % a.model)
    return 0


if __name__ == '__main__':
    sys.exit(main())
