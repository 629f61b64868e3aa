#!/usr/bin/env python3
"""tests/pytorch/shim_stats.py against shim logs made up in guest-shim/stats.c's
format: whole tables, interleaved processes, and cut, inconsistent or
hostile ones, which must be reported and never counted."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shim_stats  # noqa: E402


def line(pid, body, tag='warn'):
    return '21:37:11.314 libcuda[%d] %s: shim: %s' % (pid, tag, body)


def table(pid, rows, total=None):
    """stats.c's lines for rows [(name, calls, trips, deferred, local)]."""
    out = [line(pid, 'session vm-%d: 9 calls, 9 round trips, 0 batches of deferred calls' % pid),
           line(pid, '%-44s %10s %12s %10s %10s' % ('entry point', 'calls', 'round-trips', 'deferred', 'local'))]
    out += [line(pid, '%-44s %10d %12d %10d %10d' % r) for r in rows]
    sums = total or tuple(sum(r[i] for r in rows) for i in range(1, 5))
    out.append(line(pid, '%-44s %10d %12d %10d %10d' % (('total',) + sums)))
    out.append(line(pid, 'round trips: 1.0% of 1 calls, 1.0% of the 1 other than cuGetProcAddress'))
    return out


ROWS = [('cuMemcpyDtoH_v2', 30, 30, 0, 0), ('cuStreamSynchronize', 30, 30, 0, 0),
        ('cuGetProcAddress_v2', 900, 2, 0, 898), ('(outside entry points)', 0, 5, 0, 0),
        ('cuLaunchKernel', 3000, 0, 3000, 0), ('cuCtxGetCurrent', 4000, 0, 0, 4000)]


class Parse(unittest.TestCase):
    def test_one_table(self):
        tables, problems = shim_stats.parse('\n'.join(table(7, ROWS)) + '\n')
        self.assertEqual(problems, [])
        self.assertEqual(len(tables), 1)
        t = tables[0]
        self.assertEqual(t.pid, 7)
        self.assertEqual(t.rows['(outside entry points)']['round_trips'], 5)
        self.assertEqual(t.rows['cuLaunchKernel'], {'calls': 3000, 'round_trips': 0, 'deferred': 3000, 'local': 0})
        s = shim_stats.Summary(tables)
        self.assertEqual((s.calls, s.round_trips), (7960, 67))
        self.assertAlmostEqual(s.share(), 100.0 * 67 / 7960)
        self.assertAlmostEqual(s.share(skip_lookups=True), 100.0 * 65 / 7060)
        self.assertEqual(s.top(3), [('cuMemcpyDtoH_v2', 30), ('cuStreamSynchronize', 30),
                                    ('(outside entry points)', 5)])
        # Entry points without round trips are not listed at all.
        self.assertNotIn('cuLaunchKernel', dict(s.top(10)))

    def test_interleaved_processes_add_up(self):
        a = table(10, ROWS[:2])
        b = table(11, [('cuMemcpyDtoH_v2', 4, 4, 0, 0), ('cuEventQuery', 9, 9, 0, 0)])
        mixed = [x for pair in zip(a, b) for x in pair] + a[len(b):] + b[len(a):]
        tables, problems = shim_stats.parse('\n'.join(mixed))
        self.assertEqual(problems, [])
        s = shim_stats.Summary(tables)
        self.assertEqual(s.processes, 2)
        self.assertEqual(s.by_entry['cuMemcpyDtoH_v2'], 34)
        self.assertEqual(s.top(1), [('cuMemcpyDtoH_v2', 34)])
        self.assertEqual(s.calls, 73)

    def test_other_lines_are_not_rows(self):
        text = '\n'.join(['garbage 1 2 3 4', 'libcuda[3] warn: shim: cuFoo 1 2 3 4'] +
                         table(3, ROWS[:1])[:2] + [line(3, 'retrying 1 2 3 4 x'), line(3, 'x y')] +
                         table(3, ROWS[:1])[2:])
        tables, problems = shim_stats.parse(text)
        self.assertEqual(problems, [])
        self.assertEqual(list(tables[0].rows), ['cuMemcpyDtoH_v2'])

    def test_cut_table_is_reported_not_counted(self):
        cut = table(5, ROWS)[:-3]
        tables, problems = shim_stats.parse('\n'.join(cut))
        self.assertEqual(tables, [])
        self.assertEqual(len(problems), 1)
        self.assertIn('without its total', problems[0])
        # Cut in the middle of a line: the half row does not match either.
        half = table(5, ROWS)
        half[3] = half[3][:-7]
        tables, problems = shim_stats.parse('\n'.join(half[:4]))
        self.assertEqual(tables, [])
        self.assertIn('without its total', problems[0])

    def test_total_that_does_not_add_up(self):
        tables, problems = shim_stats.parse('\n'.join(table(6, ROWS[:2], total=(60, 61, 0, 0))))
        self.assertEqual(tables, [])
        self.assertIn('does not add up (round_trips)', problems[0])

    def test_duplicate_row_and_restarted_table(self):
        dup = table(8, ROWS[:2])
        dup.insert(3, dup[2])
        tables, problems = shim_stats.parse('\n'.join(dup))
        self.assertIn('cuMemcpyDtoH_v2 twice', problems[0])
        again = table(9, ROWS[:2])[:3] + table(9, ROWS[2:4])
        tables, problems = shim_stats.parse('\n'.join(again))
        self.assertIn('began before the previous one ended', problems[0])
        self.assertEqual([sorted(t.rows) for t in tables], [['(outside entry points)', 'cuGetProcAddress_v2']])

    def test_hostile_text(self):
        for text in ['', '\x00\xff' * 1000, 'libcuda[x] warn: shim: total 1 2 3 4',
                     line(1, 'total 1 2 3 4'), line(1, 'entry point calls round-trips deferred local') * 3,
                     line(1, 'cuX %s 1 1 1' % ('9' * 400))]:
            tables, problems = shim_stats.parse(text)
            self.assertEqual(tables, [], repr(text[:60]))
        s = shim_stats.Summary([])
        self.assertIsNone(s.share())
        self.assertEqual(s.top(), [])


if __name__ == '__main__':
    unittest.main()
