#!/usr/bin/env python3
"""Live migration of a plain guest between the system libvirtd and a second
one on this machine (vmlib.SecondLibvirtd), no tern piece involved.

The guest prints "count N" on its console every 0.2 s. It goes through:
(a) `virsh migrate --live` to the second libvirtd: running there, shut
off on the system one (its persistent definition stays), and the counter
goes on in the same console log, now written by the destination's QEMU;
(b) a live migration back: running on the system libvirtd, gone from the
second (it was transient there); (c) a migration slowed to 1 MiB/s
(--bandwidth 1) cancelled with `virsh domjobabort` on the source once the
job runs and the destination holds the incoming domain: virsh migrate
fails, the guest runs on at the source, the destination has no domain and
the source no job; (d) a non-live migration (the guest paused while its
memory is copied) and a live one back with --suspend (paused on arrival,
the counter stands still until `virsh resume`). After each step the
counter must go on, without a new boot; at the end every count from 1 on
is in the console log once and in order (nothing lost or repeated across
five QEMUs). A `migrate begin` hook in the second libvirtd's qemu.d
(given before it starts) must have run once per migration to it.

Measured on the 2-core development machine (three meson runs): boot
3.8-4.4 s, the second libvirtd 0.2 s, live migrations 2.1-2.9 s each, the
cancelled one (0.7 of 192 MiB sent after 1 s at 1 MiB/s) failing 1.6-1.8 s
after domjobabort, non-live 1.9-2.9 s, --suspend 2.1-3.1 s; 24-28 s in all.

usage: test_migrate_plain.py BUILD_DIR
"""
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmlib  # noqa: E402

GUEST = 'i=0; while :; do i=$((i + 1)); echo "count $i"; usleep 200000; done\n'
COUNT = r'count (\d+)\r?\n'
# Console lines that show the guest going on (0.2 s each).
GOING_ON = 5
TIMEOUT = 60

check = vmlib.Checks()


def counts(text):
    return [int(n) for n in re.findall(COUNT, text)]


def goes_on(dom, since, what):
    """The counter goes on in @dom's console after byte @since (taken once
    the source's QEMU is gone), past the last count before it, without a
    new boot."""
    before = counts(dom.console()[:since])[-1:] or [0]
    try:
        dom.wait_console(r'(?:%s){%d}' % (COUNT, GOING_ON), TIMEOUT, since)
    except vmlib.VmError:
        return check(False, '%s: the counter goes on (not %d more counts after %d in %d s)'
                     % (what, GOING_ON, before[0], TIMEOUT))
    after = counts(dom.console(since))
    check(after[-1] > before[0] and not re.search(vmlib.READY, dom.console(since)),
          '%s: the counter goes on (%d -> %d), no new boot' % (what, before[0], after[-1]))


def runs_on(dom, where, source, what, state):
    """@dom (as Daemon @where sees it) is in @state there; @source no
    longer runs it: the system libvirtd keeps its definition shut off, the
    second one (where it was transient) has none."""
    check(dom.state() == state, '%s: %s on %s' % (what, state, where.uri))
    r = source.virsh('domstate', dom.name, check=False)
    if source is vmlib.SYSTEM:
        check(r.returncode == 0 and r.stdout.strip() == 'shut off',
              '%s: shut off on the source (%s)' % (what, (r.stdout or r.stderr).strip()))
    else:
        check(dom.name not in source.domains(), '%s: gone from the source' % what)


def migrate(dom, dest, what, **kw):
    """Migrate and check where it runs; (the Domain on @dest, seconds)."""
    seconds = dom.migrate(dest, **kw)
    since = dom.console_size()
    print('%s: %.1f s' % (what, seconds))
    there = dom.on(dest)
    suspended = '--suspend' in kw.get('extra', ())
    runs_on(there, dest, dom.daemon, what, 'paused' if suspended else 'running')
    if not suspended:
        goes_on(there, since, what)
    return there, seconds


def cancelled(dom, dest):
    """(c): a slowed migration cancelled from the source mid-way."""
    outcome = {}

    def slow():
        t0 = time.monotonic()
        try:
            dom.migrate(dest, extra=['--bandwidth', '1'])
        except vmlib.VmError as e:
            outcome['error'] = str(e)
        outcome['t'] = time.monotonic()
        outcome['seconds'] = outcome['t'] - t0

    worker = threading.Thread(target=slow, daemon=True)
    worker.start()
    info = {}

    def job_runs():
        info.update(dom.jobinfo())
        return info.get('Job type') == 'Unbounded' or 't' in outcome
    vmlib.wait_for(job_runs, TIMEOUT, '%s: a migration job' % dom.name)
    vmlib.wait_for(lambda: dom.name in dest.domains() or 't' in outcome, TIMEOUT,
                   'the incoming domain on the destination')
    time.sleep(1)  # mid-way: well into the copy
    info = dom.jobinfo()
    check('t' not in outcome and info.get('Operation') == 'Outgoing migration' and
          dom.name in dest.domains(),
          'slowed migration: an outgoing job runs (%s processed, %s remaining), the destination '
          'holds the incoming domain' % (info.get('Data processed'), info.get('Data remaining')))
    since = dom.console_size()
    dom.domjobabort()
    t_abort = time.monotonic()
    worker.join(TIMEOUT)
    check('error' in outcome and re.search('cancel', outcome['error']),
          'cancelled migration: virsh migrate fails (%s)' % outcome.get('error', 'it did not'))
    check(dom.state() == 'running', 'cancelled migration: still running on the source')
    check(dom.name not in dest.domains(), 'cancelled migration: no domain on the destination')
    check(dom.jobinfo().get('Job type') == 'None', 'cancelled migration: no job left on the source')
    goes_on(dom, since, 'cancelled migration')
    return outcome.get('t', t_abort) - t_abort


def main():
    t0 = time.monotonic()
    lab = vmlib.Lab(sys.argv[1])
    with lab:
        hook_log = lab.path('hook.log')
        hook = '#!/bin/sh\ncat >/dev/null\necho "$1 $2 $3" >>%s\n' % hook_log
        dest = vmlib.SecondLibvirtd(lab.path('libvirtd2'), hooks={'record': hook})
        with dest:
            check(os.path.exists(os.path.join(dest.etc, 'hooks', 'qemu.d', 'record')),
                  "the hook is in the second libvirtd's qemu.d")
            dom = lab.domain(GUEST, after='idle')
            figures = ['boot %.1f s' % dom.start()]
            dom.wait_console(r'(?:%s){%d}' % (COUNT, GOING_ON), TIMEOUT)

            there, s = migrate(dom, dest, '(a) live migration')
            figures.append('live %.1f s' % s)
            dom, s = migrate(there, vmlib.SYSTEM, '(b) live migration back')
            figures.append('back %.1f s' % s)
            figures.append('abort to failure %.2f s' % cancelled(dom, dest))
            there, s = migrate(dom, dest, '(d) non-live migration', live=False)
            figures.append('non-live %.1f s' % s)

            dom, s = migrate(there, vmlib.SYSTEM, '(d) migration back with --suspend',
                             extra=['--suspend'])
            figures.append('--suspend %.1f s' % s)
            still = counts(dom.console())[-1]
            time.sleep(1)
            now = counts(dom.console())[-1]
            check(now <= still + 1, '--suspend: the counter stands still (%d -> %d)' % (still, now))
            since = dom.console_size()
            dom.resume()
            goes_on(dom, since, '--suspend, then resume')

            seen = counts(dom.console())
            check(seen == list(range(1, len(seen) + 1)),
                  'the console holds each count once and in order (1..%d)' % len(seen))
            with open(hook_log) as f:
                hooked = f.read().split('\n')
            begins = [line for line in hooked if line == '%s migrate begin' % dom.name]
            check(len(begins) == 3, "the second libvirtd's migrate begin hook ran once per migration "
                  "to it (%d of 3)" % len(begins))
    print('figures: %s; %.1f s in all' % (', '.join(figures), time.monotonic() - t0))
    check.finish('vm_migrate_plain')


if __name__ == '__main__':
    vmlib.test_main(main)
