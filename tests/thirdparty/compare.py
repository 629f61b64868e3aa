"""How tests/thirdparty/run compares a program's runs: natively against
through tern, or two native runs against each other. Every comparison
answers (ok, what): what names the first thing that differed, with both
values, so that a failure says why without its logs.

A program's output is compared line by line except for lines that vary
from run to run by nature: timings ("time ...", "median step ...", a step
line's trailing time) and allocator readings ("memory_stats ..."), which
are checked for sanity instead (jax_problems).
"""
import re

STEP = re.compile(r'^step (\d+) loss (\S+)')
MEDIAN = re.compile(r'^median step ([0-9.]+) ms$', re.M)
VARYING = re.compile(r'^(time |median step |memory_stats )')
MEMORY_STATS = re.compile(r'^memory_stats (.*)$', re.M)
DEVICE = re.compile(r'^device (\d+) (\S+) (.+) count (\d+)$', re.M)


def stable_lines(text):
    """The lines that must be the same in every run: step lines cut to
    their step and loss, varying lines left out."""
    out = []
    for line in text.splitlines():
        if VARYING.match(line):
            continue
        m = STEP.match(line)
        out.append('step %s loss %s' % m.groups() if m else line)
    return out


def first_difference(ref, got, names):
    """None when the lists are equal, else where they first differ."""
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            return 'line %d: %s %r, %s %r' % (i + 1, names[0], a, names[1], b)
    if len(ref) != len(got):
        longer, name = (ref, names[0]) if len(ref) > len(got) else (got, names[1])
        return '%s has %d more lines (%s has %d), from %r' % (
            name, abs(len(ref) - len(got)), names[1] if name == names[0] else names[0],
            min(len(ref), len(got)), longer[min(len(ref), len(got))])
    return None


def compare_output(ref, got, names=('native', 'tern')):
    diff = first_difference(stable_lines(ref), stable_lines(got), names)
    return (False, 'output differs at ' + diff) if diff else (True, 'same output (%d lines)' % len(stable_lines(ref)))


def steps(text):
    return [(int(m.group(1)), m.group(2)) for m in map(STEP.match, text.splitlines()) if m]


def median_step_ms(text):
    m = MEDIAN.search(text)
    return float(m.group(1)) if m else None


def compare_losses(ref, got, names=('native', 'tern'), want_steps=None):
    """Every step's loss equal, bit for bit (the losses' text is their
    bits), and every step there; then the rest of the stable output."""
    a, b = steps(ref), steps(got)
    if not a:
        return False, '%s printed no step lines' % names[0]
    if want_steps is not None and len(a) != want_steps:
        return False, '%s printed %d steps, %d asked for' % (names[0], len(a), want_steps)
    for (n, x), (m, y) in zip(a, b):
        if n != m:
            return False, 'step numbers differ: %s step %d, %s step %d' % (names[0], n, names[1], m)
        if x != y:
            return False, 'losses differ from step %d: %s %s, %s %s' % (n, names[0], x, names[1], y)
    if len(a) != len(b):
        return False, '%s printed %d steps, %s %d (equal as far as both went)' % (names[0], len(a), names[1], len(b))
    ok, what = compare_output(ref, got, names)
    if not ok:
        return False, 'losses equal, but the ' + what
    return True, 'losses equal (%d steps)' % len(a)


def memory_stats(text):
    """The last memory_stats line's numbers."""
    found = MEMORY_STATS.findall(text)
    if not found:
        return None
    stats = {}
    for word in found[-1].split():
        key, _, value = word.partition('=')
        try:
            stats[key] = int(value)
        except ValueError:
            stats[key] = value
    return stats


def jax_problems(text):
    """What is not sane in jax_train.py's report of its device: a list."""
    problems = []
    devices = DEVICE.findall(text)
    if not devices:
        problems.append('no "device N PLATFORM KIND count N" line')
    for _, platform, kind, count in devices:
        if platform != 'gpu':
            problems.append('device platform %r, not gpu' % platform)
        if not kind.strip():
            problems.append('a device without a kind (name)')
        if int(count) < 1:
            problems.append('device count %s' % count)
    stats = memory_stats(text)
    if stats is None:
        problems.append('no memory_stats line')
    else:
        limit = stats.get('bytes_limit')
        if not isinstance(limit, int) or limit <= 0:
            problems.append('memory_stats bytes_limit %r' % (limit,))
        elif isinstance(stats.get('bytes_in_use'), int) and stats['bytes_in_use'] > limit:
            problems.append('memory_stats bytes_in_use %d > bytes_limit %d' % (stats['bytes_in_use'], limit))
    return problems


def autotune_choices(text):
    """XLA's autotuning results (--xla_gpu_dump_autotune_results_to, text
    format) without what was measured: the choices alone, one a line."""
    text = re.sub(r'run_time\s*\{[^{}]*\}', '', text)
    return [l.strip() for l in text.splitlines()
            if l.strip() and not re.match(r'(scratch_bytes|nanos|seconds)\s*:', l.strip())]


def autotune_difference(ref_text, got_text, names=('native', 'tern')):
    """None when XLA's autotuner chose the same in both runs."""
    return first_difference(autotune_choices(ref_text), autotune_choices(got_text), names)
