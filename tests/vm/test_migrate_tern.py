#!/usr/bin/env python3
"""Issue 14's `virsh migrate` of a GPU-using guest, end to end, with every
real piece (docs/migration.md, "virsh migrate"): two libvirtd on this
machine (the system one, and vmlib.SecondLibvirtd in its own mount
namespace), each with its own ternd (sim backend; each its
--migrate-listen, the same token), tern-libvirt (--migrate-url) and the
real hook (the second libvirtd's in its private qemu.d).

The guest (test_tern_vm.py's: tern-agent on the tern port, ckpt_loop jobs
started through a command port) goes through:
  1. a job started on the source, `virsh migrate --live` to the second
     libvirtd while it runs: its checksum equals the same program's
     uninterrupted run on the host; the destination restored its session
     and the source keeps none of the domain's; a job started after the
     migration ends right too;
  2. a job running there, a migration back slowed to 1 MiB/s (--bandwidth
     1) cancelled with `virsh domjobabort` once both ternd are in it: the
     guest stays on the second libvirtd, the job ends right, the first
     ternd holds no session of the domain;
  3. a plain `virsh migrate` (not live: the switchover before the
     destination asks) back to the system libvirtd while a job runs: its
     checksum right.

Measured on the 2-core development machine: boot 3.7 s, virsh migrate
--live 2.4-3.1 s (the guest's first call on the destination waits for its
GPU state: its hello hears "no device" until the final round is planned),
54-57 s in all.

usage: test_migrate_tern.py BUILD_DIR
"""
import os
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vmlib  # noqa: E402
import test_tern_vm as tvm  # noqa: E402

check = vmlib.Checks()
log = tvm.log
MARK_AT, STEP_MS = 20, 40           # a job of 160 steps: about 6 s, more under TCG


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def job_through(guest, job, what, want, migrate):
    """Start @job, wait for its mark, call @migrate(), and check the job's
    checksum against @want."""
    since = guest.run(job, MARK_AT, STEP_MS)
    guest.wait_job(job, 'mark', since)
    migrate()
    got = guest.job_checksum(job, since)
    check(got == want, '%s: job %s ends with checksum %s (uninterrupted %s)' % (what, job, got, want))


def no_sessions(ternd, uuid, what):
    left = ternd.sessions(uuid)
    check(not left, '%s: %s keeps no session of the domain (%s)' % (what, ternd.dir, sorted(left)))


def scenario(build, lab, a, b, second, guest, want):
    uuid = guest.uuid
    boot = guest.dom.start()
    log('guest booted in %.1f s' % boot)
    guest.dom.wait_console(r'CMD open', 60)

    # 1. live, there.
    moved = {}

    def there():
        moved['s'] = guest.dom.migrate(second)
        guest.dom = guest.dom.on(second)
    job_through(guest, 'j1', 'live migration', want, there)
    log('virsh migrate --live: %.1f s' % moved['s'])
    check(guest.dom.state() == 'running', 'live migration: the guest runs on the second libvirtd')
    check('restores' in open(b.log, errors='replace').read(), 'live migration: the destination restored a session')
    check('sending its GPU state' in open(a.log, errors='replace').read(),
          'live migration: the source ternd sent the GPU state')
    vmlib.wait_for(lambda: not a.sessions(uuid), 30, 'the source dropping the domain\'s sessions')
    no_sessions(a, uuid, 'live migration')
    since = guest.run('j2', MARK_AT, 5)
    got = guest.job_checksum('j2', since)
    check(got == want, 'after the migration: a new job ends with checksum %s' % got)

    # 2. a migration back, cancelled.
    since = guest.run('j3', MARK_AT, STEP_MS)
    guest.wait_job('j3', 'mark', since)
    result = {}

    def slow():
        try:
            guest.dom.migrate(vmlib.SYSTEM, extra=['--bandwidth', '1'], timeout=300)
            result['ok'] = True
        except vmlib.VmError as e:
            result['error'] = str(e)
    t = threading.Thread(target=slow)
    t.start()
    vmlib.wait_for(lambda: 'sending its GPU state' in open(b.log, errors='replace').read() or result, 60,
                   'the GPU state\'s migration back under way')
    vmlib.wait_for(lambda: guest.dom.jobinfo().get('Job type') not in (None, 'None'), 30, 'the migration job')
    guest.dom.domjobabort()
    t.join(120)
    check('error' in result and 'cancel' in result['error'], 'domjobabort: virsh migrate fails (%s)'
          % result.get('error', 'it succeeded'))
    check(guest.dom.state() == 'running', 'domjobabort: the guest runs on where it was')
    got = guest.job_checksum('j3', since)
    check(got == want, 'domjobabort: the job ends with checksum %s (uninterrupted %s)' % (got, want))
    vmlib.wait_for(lambda: not a.sessions(uuid), 30, 'the cancelled destination dropping the domain')
    no_sessions(a, uuid, 'domjobabort')

    # 3. not live, back.
    def back():
        guest.dom.migrate(vmlib.SYSTEM, live=False)
        guest.dom = guest.dom.on(vmlib.SYSTEM)
    job_through(guest, 'j4', 'offline migration back', want, back)
    check(guest.dom.state() == 'running', 'offline migration: the guest runs on the system libvirtd')
    guest.dom.destroy()


def main():
    build, folder = tvm.begin('tern-vm-migrate.')
    dirs = {k: os.path.join(folder, k) for k in 'ab'}
    token = os.path.join(folder, 'token')
    with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'w') as f:
        f.write('vm-migrate-token-%d\n' % os.getpid())
    urls = {k: 'tcp://127.0.0.1:%d' % free_port() for k in 'ab'}
    hook = tvm.Hook(build, os.path.join(dirs['a'], 'control.sock'))
    ternds, listeners = [], []
    t0 = time.monotonic()
    try:
        tvm.libvirtd_with_hooks()
        with vmlib.Lab(build) as lab:
            tvm.hooks_mark()
            for k in 'ab':
                ternds.append(tvm.Ternd(build, dirs[k], ['--migrate-listen', urls[k], '--token-file', token,
                                                          '--ckpt', os.path.join(build, 'cli', 'ckpt')]))
            a, b = ternds
            want = tvm.host_checksum(build, a)
            log('uninterrupted run on the host: CHECKSUM %s' % want)
            with vmlib.SecondLibvirtd(lab.path('lv2'),
                                      hooks={'tern': tvm.Hook.script(build, b.control)}) as second:
                listeners.append(tvm.Listener(build, a.control, dirs['a'], ['--migrate-url', urls['a']]))
                listeners.append(tvm.Listener(build, b.control, dirs['b'],
                                              ['--connect', second.uri, '--migrate-url', urls['b']]))
                guest = tvm.Guest(lab, a, 'M')
                try:
                    scenario(build, lab, a, b, second, guest, want)
                except vmlib.VmError:
                    for t in ternds:
                        log('--- %s log tail:\n%s' % (t.dir, t.log_tail(40)))
                    for li in listeners:
                        log('--- %s:\n%s' % (li.log, li.text()[-3000:]))
                    log('--- second libvirtd:\n%s' % second.log_tail())
                    raise
    finally:
        hook.close()
        for li in listeners:
            li.stop()
        for t in ternds:
            t.stop()
    tvm.finish(folder, t0, check, 'vm_migrate')


if __name__ == '__main__':
    vmlib.test_main(main)
