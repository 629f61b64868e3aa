#!/usr/bin/env python3
"""Issue 13's acceptance, end to end: CUDA programs in real guests under
the system libvirtd keep their GPU state through virsh, with every real
piece in place (docs/libvirt.md, docs/vm-transport.md):

    guest: ckpt_loop -> shim -> tern-agent -> /dev/virtio-ports/org.tern.0
    host:  QEMU -> VMDIR/UUID.sock -> ternd's relay -> a worker (sim backend)
    libvirt: tern-hook (a wrapper in /etc/libvirt/hooks/qemu.d) and
             tern-libvirt (the lifecycle listener), both on this ternd

Each job is one ckpt_loop in a guest; its final checksum must equal the
same program's run on the host against the same ternd (uninterrupted).
Two guests (A, B) boot once each and idle; a second port per guest
(org.test.cmd, a socket of this test) carries "run ID ARGS" lines to the
guest's script, which starts the job in the background and prints "JOB ID
mark" / "JOB ID sync" when ckpt_loop writes its mark files and "JOB ID
exit N CHECKSUM X" at its end, on the console. In order:

  1. save/restore: A runs two jobs (one blocked in a 6 s
     cudaDeviceSynchronize at the save), B one blocked likewise; both
     guests saved, both restored;
  2. managedsave, ternd restarted while A is saved, then start (A);
  3. save --paused, restore --paused (still paused), resume (A); then
     suspend and resume: the same session and worker, the job ends right;
  4. two saves, then the restore of the older one: the job goes back
     (its sync mark shows again) and still ends right;
  5. ternd restarted while both guests run: stopped (SIGTERM, it runs
     with --on-stop suspend), the jobs live then end right (suspended by
     it, restored by the next ternd); killed (SIGKILL) and started again on
     the same state folder: QEMU reconnects, and a job started after it
     ends right in each (a job live at the kill fails, and must not hang);
  6. destroy with a job running: no session of A left, its worker gone;
  7. a restore whose GPU state was removed (ckpt rm of one of its
     snapshots), then one whose packs were damaged: the hook refuses each
     naming the snapshot, and A stays shut off.

A ternd that is killed ends the sessions that are live at that moment
(their workers end with it, docs/operations.md): a program that was
running fails with a CUDA error (or the shim stops it, when it touched
managed memory); one stopped with --on-stop suspend carries them over.

usage: test_tern_vm.py BUILD_DIR
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'security'))
import vmlib  # noqa: E402
import hostile  # noqa: E402

HOOKS_DIR = '/etc/libvirt/hooks/qemu.d'
HOOKS_MARK = '/run/tern-vmtest/libvirtd-hooks'
XMLNS = 'https://tern.dev/xmlns/libvirt/1'
CMD_PORT = 'org.test.cmd'
# ckpt_loop's run: every job has the same iterations (and so the same
# checksum); the mark, the step and the sync differ.
ITERATIONS = 160
EXTRA_MB = 0            # TERN_TEST_EXTRA_MB: smaller snapshots, same program
JOB_TIMEOUT = 240
OP_TIMEOUT = 180

# The guest: the agent owns the tern port; commands come on the second.
GUEST = r'''
tern-agent --log-level warn &
c=/dev/virtio-ports/%(cmd)s
exec 4<>$c
echo "CMD open"
while :; do
read -r op id a <&4 || { usleep 200000; exec 4<>$c; continue; }
[ "$op" = run ] || continue
set -- $a
m=/tmp/$id.m
(TERN_SESSION=$id TERN_TEST_EXTRA_MB=%(extra)d ckpt_loop $1 $2 $m $3 $4 $5 >/tmp/$id.o 2>&1
echo "JOB $id exit $? $(grep CHECKSUM /tmp/$id.o)"; grep -v CHECKSUM /tmp/$id.o | tail -2; touch $m.end) &
(until [ -e $m ] || [ -e $m.end ]; do usleep 50000; done; [ -e $m ] && echo "JOB $id mark"
while [ ! -e $m.end ]; do [ -e $m.sync ] && { echo "JOB $id sync"; break; }; usleep 50000; done) &
done
''' % {'cmd': CMD_PORT, 'extra': EXTRA_MB}

check = vmlib.Checks()


def log(msg):
    print(msg, flush=True)


class CommandPort:
    """The host end of a guest's command port: QEMU connects (again after
    each restore or start; a migration's destination while the source's
    connection still stands); lines go to the latest connection that is
    still open, so that after a cancelled migration they reach the source's
    QEMU again. Host-to-guest bytes written while the guest is not running
    are lost (VM.md): send only to a running guest."""

    def __init__(self, path):
        self.path = path
        self.listener = vmlib.channel_listener(path)
        self.conns = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
            # Nothing comes from the guest on this port; read to see it end.
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn):
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        # QEMU stopped (save, destroy, migrated): the next line goes to
        # another connection, or waits for QEMU's next one.
        with self.lock:
            if conn in self.conns:
                self.conns.remove(conn)
        conn.close()

    def send(self, line, timeout=60):
        """Write @line once QEMU is connected."""
        vmlib.wait_for(lambda: self.conns, timeout, 'the command port of %s connected' % self.path)
        with self.lock:
            self.conns[-1].sendall((line + '\n').encode())


class Guest:
    """A domain of the Lab, its command port and its jobs."""

    def __init__(self, lab, ternd, tag):
        self.tag = tag
        self.cmd = CommandPort(lab.path('cmd-%s.sock' % tag))
        self.uuid = str(uuidlib.uuid4())
        self.dom = lab.domain(GUEST, channels=[(ternd.domain_socket(self.uuid), 'org.tern.0'),
                                               (self.cmd.path, CMD_PORT)],
                              after='idle', memory_mib=256, uuid=self.uuid)
        self.name = self.dom.name

    def run(self, job, mark_at, step_ms, sync_at=None, sync_ms=0):
        """Start ckpt_loop as session @job; the console offset from which
        to look for its lines."""
        since = self.dom.console_size()
        args = [ITERATIONS, mark_at, step_ms] + ([sync_at, sync_ms] if sync_at is not None else [])
        self.cmd.send('run %s %s' % (job, ' '.join(str(a) for a in args)))
        return since

    def wait_job(self, job, what, since=0, timeout=JOB_TIMEOUT):
        """Wait for "JOB @job @what" (mark, sync); the console offset after it."""
        m = self.dom.wait_console(r'JOB %s %s\r?\n' % (re.escape(job), what), timeout, since)
        return since + len(self.dom.console(since)[:m.end()].encode())

    def job_end(self, job, since=0, timeout=JOB_TIMEOUT):
        """(exit status, checksum or None) of @job, once it ended."""
        # To the line's end: the console file grows as the guest prints.
        m = self.dom.wait_console(r'JOB %s exit (\d+) ?(CHECKSUM ([0-9a-f]+))?\r?\n' % re.escape(job), timeout, since)
        if m.group(1) != '0' or not m.group(3):
            tail = self.dom.console(since)[m.start():m.start() + 600]
            log('%s job %s failed: %s' % (self.tag, job, tail))
        return int(m.group(1)), m.group(3)

    def job_checksum(self, job, since=0, timeout=JOB_TIMEOUT):
        status, checksum = self.job_end(job, since, timeout)
        return checksum if status == 0 else None


class Ternd:
    """The real ternd: sim backend, its own sockets and state folder in the
    Lab's folder; QEMU (libvirt-qemu) reaches the domain sockets through
    --vm-socket-group, and nothing else of ternd's."""

    def __init__(self, build, folder, extra=()):
        self.build = build
        self.extra = list(extra)
        self.dir = folder
        self.control = os.path.join(self.dir, 'control.sock')
        self.sock = os.path.join(self.dir, 'ternd.sock')
        self.vm_dir = os.path.join(self.dir, 'vm')
        self.state = os.path.join(self.dir, 'state')
        self.log = os.path.join(self.dir, 'ternd.log')
        for d in (self.dir, self.vm_dir):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
        self.proc = None
        self.start()

    def start(self):
        if os.path.exists(self.control):
            os.unlink(self.control)
        cmd = [os.path.join(self.build, 'replayer', 'ternd'), '--backend', 'sim',
               '--sim-kernels', os.path.join(self.build, 'tests', 'cuda', 'libtern_test_kernels.so'),
               '--sim-memory', '4G', '--listen', 'unix:' + self.sock, '--control', self.control,
               '--state-dir', self.state, '--vm-dir', self.vm_dir, '--vm-socket-group', 'libvirt-qemu',
               '--on-stop', 'suspend',
               '--log-file', self.log, '--log-level', 'info'] + self.extra
        self.proc = subprocess.Popen(cmd, start_new_session=True)
        vmlib.wait_for(lambda: os.path.exists(self.control) or self.proc.poll() is not None, 20,
                       'ternd\'s control socket')
        if self.proc.poll() is not None:
            raise vmlib.VmError('ternd exited with %d at start; log:\n%s' % (self.proc.returncode, self.log_tail()))

    def stop(self):
        if self.proc:
            vmlib.process_stop(self.proc)

    def domain_socket(self, uuid):
        return os.path.join(self.vm_dir, uuid + '.sock')

    def request(self, req, timeout=120):
        r = hostile.control_request(self.control, req, timeout)
        if not r:
            raise vmlib.VmError('ternd gave no answer to %r' % (req,))
        return r

    def sessions(self, uuid):
        st = self.request({'op': 'status'})
        return {e['id']: e for e in st['sessions'] if e.get('domain_uuid') == uuid}

    def log_tail(self, lines=25):
        return vmlib.file_tail(self.log, lines)


class Listener:
    def __init__(self, build, control, folder, extra=()):
        self.log = os.path.join(folder, 'tern-libvirt.log')
        self.out = open(self.log, 'a')
        self.proc = subprocess.Popen([os.path.join(build, 'libvirt-hooks', 'tern-libvirt'), '--control', control,
                                      '--log-level', 'debug'] + list(extra), stderr=self.out,
                                     start_new_session=True)
        vmlib.wait_for(lambda: 'connected to' in self.text() or self.proc.poll() is not None, 30,
                       'tern-libvirt connected to libvirtd')
        if self.proc.poll() is not None:
            raise vmlib.VmError('tern-libvirt exited: %s' % self.text()[-2000:])

    def text(self):
        with open(self.log, errors='replace') as f:
            return f.read()

    def stop(self):
        vmlib.process_stop(self.proc, 10)
        self.out.close()


class Hook:
    """The real tern-hook, as libvirt runs it: an executable wrapper in
    qemu.d that only acts for this test's domains (the system libvirtd runs
    every qemu.d script for every domain) and names this ternd's control
    socket. Removed by close(), also at exit and on SIGTERM."""

    def __init__(self, build, control):
        os.makedirs(HOOKS_DIR, exist_ok=True)
        for old in glob.glob(os.path.join(HOOKS_DIR, 'tern-vmtest-*')):
            m = re.search(r'tern-vmtest-(\d+)$', old)
            if m and not vmlib.pid_alive(int(m.group(1))):
                os.unlink(old)      # a run killed by SIGKILL
        self.path = os.path.join(HOOKS_DIR, 'tern-vmtest-%d' % os.getpid())
        with open(self.path + '.tmp', 'w') as f:
            f.write(self.script(build, control))
        os.chmod(self.path + '.tmp', 0o755)
        os.rename(self.path + '.tmp', self.path)

    @staticmethod
    def script(build, control):
        return ('#!/bin/sh\n# tests/vm, pid %d: removed when it ends\n'
                'case "$1" in %s%d-*) ;; *) exit 0 ;; esac\n'
                'exec %s --control %s --timeout 120 "$@"\n'
                % (os.getpid(), vmlib.NAME_PREFIX, os.getpid(),
                   os.path.join(build, 'libvirt-hooks', 'tern-hook'), control))

    def close(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def libvirtd_pid():
    try:
        with open('/run/libvirtd.pid') as f:
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return None


def started_at(pid):
    """When process @pid started, in seconds since the epoch."""
    with open('/proc/%d/stat' % pid) as f:
        ticks = int(f.read().rsplit(')', 1)[1].split()[19])
    with open('/proc/stat') as f:
        boot = int(next(line for line in f if line.startswith('btime')).split()[1])
    return boot + ticks / os.sysconf('SC_CLK_TCK')


def libvirtd_runs_hooks(pid):
    """Whether libvirtd @pid runs qemu.d's scripts: it looks once, at its
    start, for an executable there (measured: a libvirtd started with qemu.d
    empty never runs a script put there later). Known from an executable
    older than the daemon, or from HOOKS_MARK, which a run of this test
    writes for a libvirtd it saw start with its hook in place."""
    try:
        with open(HOOKS_MARK) as f:
            if int(f.read()) == pid:
                return True
    except (FileNotFoundError, ValueError):
        pass
    start = started_at(pid)
    for entry in glob.glob(os.path.join(HOOKS_DIR, '*')):
        st = os.stat(entry)
        if os.access(entry, os.X_OK) and not os.path.isdir(entry) and st.st_mtime < start - 1:
            return True
    return False


def libvirtd_with_hooks():
    """A libvirtd that runs the hook: restart the running one if it cannot
    (once the other domains on it are gone, for a while at most: a restart
    under a running guest can lose it); vmlib.ensure_daemons starts it."""
    pid = libvirtd_pid()
    if not pid or not vmlib.pid_alive(pid) or not vmlib.socket_answers('/run/libvirt/libvirt-sock'):
        return
    if libvirtd_runs_hooks(pid):
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not vmlib.virsh('list', '--name', timeout=30, check=False).stdout.split():
            break
        time.sleep(2)
    log('libvirtd %d started without a script in %s, so it runs none: restarting it' % (pid, HOOKS_DIR))
    os.kill(pid, signal.SIGTERM)
    vmlib.wait_for(lambda: not vmlib.pid_alive(pid), 60, 'libvirtd to stop')


def hooks_mark():
    pid = libvirtd_pid()
    if pid and libvirtd_runs_hooks(pid):
        os.makedirs(os.path.dirname(HOOKS_MARK), exist_ok=True)
        with open(HOOKS_MARK, 'w') as f:
            f.write('%d\n' % pid)


def host_checksum(build, ternd):
    """The uninterrupted run: the same ckpt_loop on the host, same ternd."""
    env = dict(os.environ, TERN_SERVER='unix:' + ternd.sock, TERN_SESSION='host-reference',
               TERN_TEST_EXTRA_MB=str(EXTRA_MB), LD_LIBRARY_PATH=os.path.join(build, 'guest-shim'))
    r = subprocess.run([os.path.join(build, 'tests', 'cuda', 'ckpt_loop'), str(ITERATIONS)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    m = re.search(r'CHECKSUM ([0-9a-f]+)', r.stdout)
    if r.returncode or not m:
        raise vmlib.VmError('ckpt_loop on the host: exit %d: %s' % (r.returncode, (r.stderr or r.stdout)[-1500:]))
    return m.group(1)


def image_generation(path):
    xml = vmlib.virsh('save-image-dumpxml', path, timeout=60).stdout
    m = re.search(r'<tern:gpu [^>]*generation=[\'"]([0-9a-f]+)[\'"]', xml)
    return m.group(1) if m else None


def wait_saved(ternd, guest, jobs, timeout=OP_TIMEOUT):
    """Wait for the listener's vm-save: every job's session of @guest
    suspended with no GPU memory; the sessions."""
    ids = {'%s/%s' % (guest.uuid, j) for j in jobs}

    def saved():
        s = ternd.sessions(guest.uuid)
        return ids <= set(s) and all(s[i]['state'] == 'suspended' and s[i]['memory'] == 0 for i in ids)
    vmlib.wait_for(saved, timeout, '%s: its sessions %s saved by vm-save' % (guest.name, sorted(ids)))
    return ternd.sessions(guest.uuid)


def jobs_end(want, pending):
    """Wait for each (guest, job, console offset) of @pending; check its checksum."""
    for guest, job, since, what in pending:
        got = guest.job_checksum(job, since)
        check(got == want, '%s: job %s (%s) ends with the uninterrupted checksum (%s)' % (guest.tag, job, what, got))


def scenario(build, lab, ternd, a, b, want):
    t0 = time.monotonic()
    for g in (a, b):
        g.dom.start(timeout=180)
        g.dom.wait_console(r'CMD open', 60)
    log('both guests up in %.1f s' % (time.monotonic() - t0))

    # 1. save and restore, a guest blocked in a synchronisation, two jobs
    # in one guest and two guests on one ternd.
    t = time.monotonic()
    a1 = a.run('a1', 20, 20, 30, 6000)
    a2 = a.run('a2', 20, 30)
    b1 = b.run('b1', 20, 20, 30, 6000)
    a.wait_job('a2', 'mark', a2)
    a.wait_job('a1', 'sync', a1)
    # The guest pauses as the save begins, well within a1's 6 s wait.
    seen = time.monotonic()
    took = a.dom.save(lab.path('a1.save'))
    log('A saved in %.1f s, begun %.2f s after a1 was seen entering its cudaDeviceSynchronize; a2 mid-loop'
        % (took, time.monotonic() - took - seen))
    b.wait_job('b1', 'sync', b1)
    b.dom.save(lab.path('b1.save'))
    check(a.dom.state() == 'shut off' and b.dom.state() == 'shut off', 'save: both guests shut off')
    gen_a = image_generation(lab.path('a1.save'))
    check(gen_a is not None, 'save-image-dumpxml shows A\'s generation (%s)' % gen_a)
    saved = wait_saved(ternd, a, ['a1', 'a2'])
    wait_saved(ternd, b, ['b1'])
    log('vm-save: A\'s two sessions and B\'s one suspended, GPU memory freed: %s'
        % {k.split('/')[1]: v.get('snapshot') for k, v in saved.items()})
    a.dom.restore(lab.path('a1.save'))
    b.dom.restore(lab.path('b1.save'))
    check(a.dom.state() == 'running' and b.dom.state() == 'running', 'restore: both guests running')
    jobs_end(want, [(a, 'a1', a1, 'blocked in a sync at the save'), (a, 'a2', a2, 'second process'),
                    (b, 'b1', b1, 'second guest')])
    log('step 1 in %.1f s' % (time.monotonic() - t))

    # 2. managedsave, a ternd restart while A is saved, then start.
    t = time.monotonic()
    since = a.run('a3', 20, 20)
    a.wait_job('a3', 'mark', since)
    a.dom.managedsave()
    check('Managed save:   yes' in vmlib.virsh('dominfo', a.name).stdout, 'managedsave: a managed save image')
    wait_saved(ternd, a, ['a3'])
    # ternd restarts while the guest is saved: the state folder keeps it.
    ternd.stop()
    ternd.start()
    a.dom.start_saved()
    jobs_end(want, [(a, 'a3', since, 'managedsave, ternd restarted, start')])
    log('step 2 in %.1f s' % (time.monotonic() - t))

    # 3. save --paused, restore --paused, resume.
    t = time.monotonic()
    since = a.run('a4', 20, 20)
    a.wait_job('a4', 'mark', since)
    vmlib.virsh('save', a.name, lab.path('a4.save'), '--paused', timeout=OP_TIMEOUT)
    wait_saved(ternd, a, ['a4'])
    vmlib.virsh('restore', lab.path('a4.save'), '--paused', timeout=OP_TIMEOUT)
    check(a.dom.state() == 'paused', 'restore --paused: the guest is paused')
    # A paused guest cannot come back for its session.
    time.sleep(2)
    state = ternd.sessions(a.uuid).get(a.uuid + '/a4', {}).get('state')
    check(state == 'restoring', 'restore --paused: session a4 waits for its guest (%s)' % state)
    a.dom.resume()
    jobs_end(want, [(a, 'a4', since, 'save --paused, restore --paused, resume')])
    # suspend and resume keep the state: the session is the same one,
    # neither saved nor restored, and the job ends right.
    since = a.run('a4s', 20, 20)
    a.wait_job('a4s', 'mark', since)
    before = ternd.sessions(a.uuid).get(a.uuid + '/a4s', {})
    a.dom.suspend()
    time.sleep(2)
    during = ternd.sessions(a.uuid).get(a.uuid + '/a4s', {})
    check(during.get('state') == 'active' and during.get('pid') == before.get('pid'),
          'suspend: session a4s stays active in its worker %s (%s)' % (before.get('pid'), during.get('state')))
    a.dom.resume()
    jobs_end(want, [(a, 'a4s', since, 'suspend, resume')])
    log('step 3 in %.1f s' % (time.monotonic() - t))

    # 4. two saves, then the older one restored.
    t = time.monotonic()
    since = a.run('a5', 20, 20, 60, 1)
    a.wait_job('a5', 'mark', since)
    a.dom.save(lab.path('a5-old.save'))
    wait_saved(ternd, a, ['a5'])
    a.dom.restore(lab.path('a5-old.save'))
    after_old = a.wait_job('a5', 'sync', since)
    a.dom.save(lab.path('a5-new.save'))
    wait_saved(ternd, a, ['a5'])
    gen_old, gen_new = image_generation(lab.path('a5-old.save')), image_generation(lab.path('a5-new.save'))
    check(gen_old and gen_new and gen_old != gen_new, 'two saves, two generations (%s, %s)' % (gen_old, gen_new))
    old = ternd.request({'op': 'vm-restore', 'uuid': a.uuid, 'generation': gen_old, 'check': True})
    new = ternd.request({'op': 'vm-restore', 'uuid': a.uuid, 'generation': gen_new, 'check': True})
    check(old.get('ok') and new.get('ok') and old['snapshots'] != new['snapshots'],
          'ternd holds both generations, each its own snapshots (%s; %s)'
          % (old.get('snapshots') or old, new.get('snapshots') or new))
    a.dom.restore(lab.path('a5-old.save'))
    planned = ternd.sessions(a.uuid).get(a.uuid + '/a5', {})
    check(planned.get('snapshot') == old['snapshots'][0]['snapshot'],
          'restoring the older image plans its snapshot (%s)' % planned.get('snapshot'))
    # The older state: the job is back before its sync mark and passes it again.
    a.wait_job('a5', 'sync', after_old)
    jobs_end(want, [(a, 'a5', after_old, 'two saves, the older restored')])
    log('step 4 in %.1f s' % (time.monotonic() - t))

    # 5. ternd restarted while the guests run. Stopped (SIGTERM; it runs
    # with --on-stop suspend), it suspends the live jobs' sessions and the
    # next ternd restores them when their guests reconnect: they end right.
    # Killed, a job live then loses its session (see above): it must end,
    # not hang.
    t = time.monotonic()
    running = []
    for g, job in ((a, 'a6r'), (b, 'b6r')):
        since = g.run(job, 20, 30)
        g.wait_job(job, 'mark', since)
        running.append((g, job, since, 'running while ternd stopped (SIGTERM) and started again'))
    stopped_pid = ternd.proc.pid
    ternd.proc.send_signal(signal.SIGTERM)
    check(ternd.proc.wait(90) == 0, 'ternd --on-stop suspend exits 0 at SIGTERM with two jobs live')
    ternd.start()
    jobs_end(want, running)
    check(ternd.request({'op': 'status'})['pid'] != stopped_pid, 'ternd started again (pid %d)' % ternd.proc.pid)
    live = a.run('a6x', 20, 30)
    a.wait_job('a6x', 'mark', live)
    old_pid = ternd.proc.pid
    ternd.proc.kill()
    ternd.proc.wait()
    ternd.start()
    status, _ = a.job_end('a6x', live, 60)
    check(status != 0, 'a job live when ternd was killed ends (exit %d) instead of hanging' % status)
    check(ternd.request({'op': 'status'})['pid'] != old_pid, 'ternd started again (pid %d)' % ternd.proc.pid)
    pending = []
    for g, job in ((a, 'a6'), (b, 'b6')):
        since = g.run(job, 20, 0)
        pending.append((g, job, since, 'after ternd was killed and started again'))
    jobs_end(want, pending)
    log('step 5 in %.1f s' % (time.monotonic() - t))

    # 6. destroy frees the session's GPU memory.
    since = a.run('a7', 10, 50)
    a.wait_job('a7', 'mark', since)
    live = ternd.sessions(a.uuid).get(a.uuid + '/a7')
    check(live and live['state'] == 'active' and live['memory'] > 0,
          'before destroy: session a7 active with %s bytes of GPU memory' % (live or {}).get('memory'))
    a.dom.destroy()
    vmlib.wait_for(lambda: not ternd.sessions(a.uuid), 60, 'no session of A after destroy')
    worker = live['pid'] if live else 0
    vmlib.wait_for(lambda: not worker or not vmlib.pid_alive(worker), 30, 'a7\'s worker gone')
    check(not ternd.sessions(a.uuid), 'destroy: no session of A left, worker %d gone' % worker)
    b.dom.destroy()

    # 7. restores whose GPU state is gone or damaged: refused, A stays off.
    gone = new['snapshots'][0]['snapshot']
    ckpt = os.path.join(build, 'cli', 'ckpt')
    r = subprocess.run([ckpt, '--state-dir', ternd.state, 'rm', '--force', gone], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    check(r.returncode == 0, 'ckpt rm --force %s: %s' % (gone, r.stdout.strip()))
    refused_restore(a, lab.path('a5-new.save'), gone, 'removed')
    check(hostile.store_packs_damage(ternd.state) > 0, 'a byte of every pack of the store flipped')
    refused_restore(a, lab.path('a5-old.save'), old['snapshots'][0]['snapshot'], 'corrupted')


def refused_restore(guest, image, snapshot, how):
    r = vmlib.virsh('restore', image, timeout=OP_TIMEOUT, check=False)
    msg = r.stderr.strip()
    check(r.returncode != 0 and 'tern: cannot restore the GPU state of domain %s' % guest.name in msg
          and snapshot in msg, 'GPU state %s: virsh restore refused, naming %s: ...%s' % (how, snapshot, msg[-200:]))
    check(guest.dom.state() == 'shut off', 'GPU state %s: the domain stays shut off' % how)


def finish(folder, t0, checks, name):
    """A test's end: its folder removed (kept with TERN_VM_KEEP=1), its
    time and its checks' verdict."""
    if os.environ.get('TERN_VM_KEEP') == '1':
        log('TERN_VM_KEEP=1: kept %s' % folder)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    log('%.0f s in all' % (time.monotonic() - t0))
    checks.finish(name)


def begin(prefix):
    """A test's start: (build folder, a folder of its own, mode 0755 for
    QEMU); skipped when this host cannot run guests."""
    build = os.path.abspath(sys.argv[1])
    reason = vmlib.host_unfit()
    if reason:
        vmlib.skip(reason)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    folder = tempfile.mkdtemp(prefix=prefix)
    os.chmod(folder, 0o755)
    return build, folder


def main():
    # ternd's folder is known before libvirtd starts: the hook names its control socket.
    build, folder = begin('tern-vm-e2e.')
    ternd = listener = None
    hook = Hook(build, os.path.join(folder, 'control.sock'))
    t0 = time.monotonic()
    try:
        libvirtd_with_hooks()
        with vmlib.Lab(build) as lab:
            hooks_mark()
            ternd = Ternd(build, folder)
            want = host_checksum(build, ternd)
            log('uninterrupted run on the host: CHECKSUM %s' % want)
            listener = Listener(build, ternd.control, folder)
            a = Guest(lab, ternd, 'A')
            b = Guest(lab, ternd, 'B')
            try:
                scenario(build, lab, ternd, a, b, want)
            except vmlib.VmError:
                for what, text in (('ternd', ternd.log_tail()), ('tern-libvirt', listener.text()[-3000:])):
                    log('--- %s log tail:\n%s' % (what, text))
                raise
    finally:
        hook.close()
        if listener:
            listener.stop()
        if ternd:
            ternd.stop()
    finish(folder, t0, check, 'vm_tern')


if __name__ == '__main__':
    vmlib.test_main(main)
