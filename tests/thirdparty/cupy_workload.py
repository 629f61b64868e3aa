#!/usr/bin/env python3
"""Drive CuPy (a CUDA library tern has no test of its own for) through a
range of its GPU paths and print a digest of every result. The runner
(tests/thirdparty/run) runs this natively and through tern on the same GPU
and compares the two outputs line by line: they must be identical.

Paths: NVRTC-compiled elementwise and raw kernels, reductions, cuBLAS
(matmul), cuFFT, cuRAND, CUB (sort, scan), cuSOLVER (solve), cuSPARSE
(sparse-dense product), streams and events.
"""
import hashlib

import cupy as cp
import cupyx.scipy.sparse as sparse


def digest(name, a):
    host = cp.asnumpy(a)
    print('%-12s %s %s %s' % (name, host.dtype, host.shape, hashlib.sha256(host.tobytes()).hexdigest()[:32]),
          flush=True)


def main():
    print('device', cp.cuda.runtime.getDeviceProperties(0)['name'].decode(), flush=True)
    rs = cp.random.RandomState(seed=7)                         # cuRAND
    a = rs.standard_normal((512, 512), dtype=cp.float32)
    b = rs.standard_normal((512, 512), dtype=cp.float32)
    digest('curand', a)

    saxpy = cp.ElementwiseKernel('float32 x, float32 y, float32 k', 'float32 z', 'z = k * x + y', 'saxpy')
    digest('elementwise', saxpy(a, b, cp.float32(2.5)))       # NVRTC + module load + launch

    raw = cp.RawKernel(r'''
    extern "C" __global__ void rowsum(const float *m, float *out, int n) {
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r < n) { float s = 0; for (int c = 0; c < n; c++) s += m[r * n + c]; out[r] = s; }
    }''', 'rowsum')
    out = cp.empty(512, dtype=cp.float32)
    raw((4,), (128,), (a, out, cp.int32(512)))
    digest('rawkernel', out)

    digest('reduction', cp.stack([a.sum(axis=0), a.max(axis=1), cp.abs(b).mean(axis=0)]))
    digest('cublas', a @ b)
    digest('cufft', cp.fft.fft2(a.astype(cp.complex64)))
    digest('cub_sort', cp.sort(a.ravel()))
    # Integers: a float scan's rounding depends on how CUB's look-back groups
    # tiles, which varies from run to run even natively.
    digest('cub_cumsum', cp.cumsum((b * 1000).astype(cp.int64).ravel()))
    m = a + 512 * cp.eye(512, dtype=cp.float32)               # well conditioned
    digest('cusolver', cp.linalg.solve(m, b[:, :8]))
    s = sparse.random(512, 512, density=0.02, format='csr', dtype=cp.float32, random_state=3)
    digest('cusparse', s @ b)

    stream = cp.cuda.Stream(non_blocking=True)                 # streams and events
    with stream:
        c = cp.tanh(a) * 3
        ev = stream.record()
    cp.cuda.get_current_stream().wait_event(ev)
    digest('stream', c + 1)
    print('PASS cupy_workload', flush=True)


if __name__ == '__main__':
    main()
