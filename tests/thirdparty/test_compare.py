#!/usr/bin/env python3
"""tests/thirdparty/compare.py against made-up outputs of the third-party
programs: what must count as the same, what must not, and that every
failure names what differed with both values."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402


def jax_output(losses, limit=105 * 2**30, kind='NVIDIA H200', ms=1.5, in_use=4096):
    lines = ['jax 0.11.0', 'device 0 gpu %s count 1' % kind,
             'memory_stats bytes_in_use=%d bytes_limit=%d peak_bytes_in_use=%d' % (in_use, limit, in_use)]
    lines += ['step %d loss %s (1.0) %.3f ms' % (i, l, ms + i) for i, l in enumerate(losses)]
    lines += ['median step %.3f ms' % ms, 'device 0 gpu %s count 1' % kind,
              'memory_stats bytes_in_use=%d bytes_limit=%d' % (in_use, limit), 'PASS jax_train mlp']
    return '\n'.join(lines) + '\n'


LOSSES = ['0x40135d8e', '0x4011f2a3', '0x40108b4c']


class Losses(unittest.TestCase):
    def test_equal_despite_times_and_memory(self):
        ok, what = compare.compare_losses(jax_output(LOSSES), jax_output(LOSSES, ms=9.0, limit=7, in_use=3),
                                          want_steps=3)
        self.assertTrue(ok, what)
        self.assertEqual(what, 'losses equal (3 steps)')

    def test_one_bit(self):
        other = LOSSES[:1] + ['0x4011f2a2'] + LOSSES[2:]
        ok, what = compare.compare_losses(jax_output(LOSSES), jax_output(other))
        self.assertFalse(ok)
        self.assertIn('from step 1', what)
        self.assertIn('native 0x4011f2a3', what)
        self.assertIn('tern 0x4011f2a2', what)

    def test_missing_steps(self):
        ok, what = compare.compare_losses(jax_output(LOSSES), jax_output(LOSSES[:2]))
        self.assertFalse(ok)
        self.assertIn('native printed 3 steps, tern 2', what)

    def test_fewer_than_asked(self):
        ok, what = compare.compare_losses(jax_output(LOSSES), jax_output(LOSSES), want_steps=30)
        self.assertFalse(ok)
        self.assertIn('3 steps, 30 asked for', what)

    def test_no_steps(self):
        ok, what = compare.compare_losses('PASS\n', jax_output(LOSSES))
        self.assertFalse(ok)
        self.assertIn('no step lines', what)

    def test_other_device_name(self):
        ok, what = compare.compare_losses(jax_output(LOSSES), jax_output(LOSSES, kind='NVIDIA H100'))
        self.assertFalse(ok)
        self.assertIn('H200', what)
        self.assertIn('H100', what)

    def test_fake_train_format(self):
        """tests/pytorch/fake_train.py's lines, the plumbing test's trainer."""
        text = 'step 0 loss 1a2b\nstep 1 loss 3c4d\nmedian step 2.000 ms\nPASS train mem\n'
        self.assertEqual(compare.steps(text), [(0, '1a2b'), (1, '3c4d')])
        self.assertEqual(compare.median_step_ms(text), 2.0)
        self.assertTrue(compare.compare_losses(text, text.replace('2.000', '5.000'))[0])


class Sanity(unittest.TestCase):
    def test_sane(self):
        self.assertEqual(compare.jax_problems(jax_output(LOSSES)), [])

    def test_no_limit(self):
        problems = compare.jax_problems(jax_output(LOSSES, limit=0))
        self.assertEqual(problems, ['memory_stats bytes_limit 0'])

    def test_cpu_only(self):
        text = jax_output(LOSSES).replace(' gpu ', ' cpu ')
        self.assertIn("device platform 'cpu', not gpu", compare.jax_problems(text))

    def test_nothing(self):
        problems = compare.jax_problems('PASS jax_train mlp\n')
        self.assertEqual(len(problems), 2)

    def test_in_use_over_limit(self):
        self.assertIn('bytes_in_use 10 > bytes_limit 5', compare.jax_problems(jax_output(LOSSES, limit=5, in_use=10))[0])


class Output(unittest.TestCase):
    DIGESTS = ('device NVIDIA H200 triton 3.6.0\n'
               'vector_add       float32 (98432,) 0123abcd equal to torch\n'
               'softmax          float32 (1823, 781) 4567ef01 max_abs_err 5.960e-08\n'
               'time all 1.234 s\nPASS triton_kernels\n')

    def test_same_but_time(self):
        ok, what = compare.compare_output(self.DIGESTS, self.DIGESTS.replace('1.234', '7.000'))
        self.assertTrue(ok, what)

    def test_digest_differs(self):
        ok, what = compare.compare_output(self.DIGESTS, self.DIGESTS.replace('4567ef01', '4567ef02'))
        self.assertFalse(ok)
        self.assertIn('line 3', what)
        self.assertIn('4567ef01', what)
        self.assertIn('4567ef02', what)

    def test_cut_short(self):
        ok, what = compare.compare_output(self.DIGESTS, '\n'.join(self.DIGESTS.splitlines()[:2]))
        self.assertFalse(ok)
        self.assertIn('native has 2 more lines', what)


class Autotune(unittest.TestCase):
    RESULTS = '''version: 3
results {
  device: "CUDA: 9.0, Cores: 132"
  hlo: "(f32[128,512]{1,0}) fusion(...)"
  result {
    run_time {
      nanos: 12345
    }
    gemm {
      algorithm: 7
    }
  }
}
'''

    def test_timing_alone_differs(self):
        self.assertIsNone(compare.autotune_difference(self.RESULTS, self.RESULTS.replace('12345', '99999')))

    def test_choice_differs(self):
        diff = compare.autotune_difference(self.RESULTS, self.RESULTS.replace('algorithm: 7', 'algorithm: 11'))
        self.assertIn('algorithm: 7', diff)
        self.assertIn('algorithm: 11', diff)


if __name__ == '__main__':
    unittest.main()
