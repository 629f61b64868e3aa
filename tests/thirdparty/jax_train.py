#!/usr/bin/env python3
"""JAX (XLA through the CUDA 13 plugin: jax.jit, jax.grad, its own
allocator with the default preallocation, XLA's autotuning as it is by
default) training a small MLP with a fixed seed. tests/thirdparty/run runs
it natively and through tern and requires every step's loss to be equal
bit for bit; with --mark it snapshots the session mid-training, restores
it into a new worker and requires the losses of an uninterrupted run.

usage: jax_train.py MODEL [--steps N] [--mark STEP FILE] [--pause S] [--seed N]
  MODEL: mlp (the argument keeps tests/pytorch/train.py's interface, so that
  tests/pytorch/fake_train.py stands in for this program where there is no
  JAX: the runner's plumbing test on the sim)
  --mark: after step STEP create FILE, then take --pause seconds before each
  later step, so that the runner can snapshot and restore the session while
  the training goes on

Prints: the device ("device 0 gpu NVIDIA H200 count 1"), its memory_stats()
(XLA's allocator: bytes_limit is what it may use), one line per step,
"step N loss 0xBITS (VALUE) T ms" with the float32 loss's bits in hex,
the median step time, and PASS. A device or memory_stats() that is not
sane (no GPU, no name, bytes_limit 0) is a FAIL line and exit status 1.
"""
import argparse
import statistics
import sys
import time


def fail(msg):
    print('FAIL jax_train: ' + msg, flush=True)
    sys.exit(1)


def describe_device(jax):
    devices = jax.devices()
    if not devices:
        fail('jax.devices() is empty')
    d = devices[0]
    if d.platform != 'gpu':
        fail('jax.devices()[0] is %r on platform %r, not a GPU (is the CUDA plugin loaded?)' % (d, d.platform))
    if not d.device_kind.strip():
        fail('jax.devices()[0] has no device kind (the driver gave no name)')
    print('device %d %s %s count %d' % (d.id, d.platform, d.device_kind, len(devices)), flush=True)
    stats = d.memory_stats()
    if not stats:
        fail('jax.devices()[0].memory_stats() is %r' % (stats,))
    print('memory_stats ' + ' '.join('%s=%s' % kv for kv in sorted(stats.items())), flush=True)
    if stats.get('bytes_limit', 0) <= 0:
        fail('memory_stats() bytes_limit is %r' % stats.get('bytes_limit'))
    if stats.get('bytes_in_use', 0) > stats['bytes_limit']:
        fail('memory_stats() bytes_in_use %d > bytes_limit %d' % (stats['bytes_in_use'], stats['bytes_limit']))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model', choices=['mlp'])
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--mark', nargs=2, metavar=('STEP', 'FILE'))
    ap.add_argument('--pause', type=float, default=0.1)
    ap.add_argument('--seed', type=int, default=1234)
    a = ap.parse_args()
    import jax
    import jax.numpy as jnp
    import numpy as np

    print('jax %s' % jax.__version__, flush=True)
    describe_device(jax)

    sizes = [256, 512, 512, 10]
    keys = jax.random.split(jax.random.PRNGKey(a.seed), len(sizes) + 1)
    params = [(jax.random.normal(k, (m, n), jnp.float32) * np.float32(np.sqrt(2.0 / m)),
               jnp.zeros((n,), jnp.float32)) for k, m, n in zip(keys, sizes[:-1], sizes[1:])]
    kx, ky = jax.random.split(keys[-1])
    x = jax.random.normal(kx, (128, sizes[0]), jnp.float32)
    y = jax.random.randint(ky, (128,), 0, sizes[-1])

    def loss_fn(p, x, y):
        h = x
        for w, b in p[:-1]:
            h = jax.nn.gelu(h @ w + b)
        w, b = p[-1]
        logp = jax.nn.log_softmax(h @ w + b)
        # One-hot, not a gather: a gather's gradient is a scatter-add,
        # whose atomics add in no fixed order.
        loss = -jnp.mean(jnp.sum(jax.nn.one_hot(y, sizes[-1], dtype=jnp.float32) * logp, axis=-1))
        return loss, loss

    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8

    @jax.jit
    def train_step(p, m, v, t, x, y):
        grads, loss = jax.grad(loss_fn, has_aux=True)(p, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), p, m, v)
        return p, m, v, t, loss

    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    t = jnp.zeros((), jnp.float32)
    times = []
    for i in range(a.steps):
        t0 = time.perf_counter()
        params, m, v, t, loss = train_step(params, m, v, t, x, y)
        value = np.asarray(jax.block_until_ready(loss), dtype=np.float32).reshape(())
        times.append(time.perf_counter() - t0)
        print('step %d loss 0x%08x (%.9g) %.3f ms' % (i, int(value.view(np.uint32)), float(value),
                                                      times[-1] * 1e3), flush=True)
        if a.mark and i >= int(a.mark[0]):
            if i == int(a.mark[0]):
                open(a.mark[1], 'w').close()
            time.sleep(a.pause)
    if not np.isfinite(float(value)):
        fail('the loss is %r' % float(value))
    print('median step %.3f ms' % (statistics.median(times[len(times) // 3:]) * 1e3))
    describe_device(jax)        # again after training: the allocator's use moved
    print('PASS jax_train %s' % a.model)
    return 0


if __name__ == '__main__':
    sys.exit(main())
