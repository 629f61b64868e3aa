#!/usr/bin/env python3
"""ternd's side of libvirt domains (docs/libvirt.md, "ternd's side"), on the
sim backend, without a VM: tern-agent connects to a domain's socket as QEMU's
port would (--port-connect), and programs reach ternd through the agent's
socket, the vmlink channel and the domain's relay (docs/vm-transport.md).

usage: test_vm_host.py ivshmem-hostile --ternd PATH --agent PATH
       test_vm_host.py e2e --ternd PATH --agent PATH --shim-dir DIR --prog CKPT_LOOP --plugin SO --ckpt PATH [--ivshmem]
       test_vm_host.py hostile --ternd PATH --agent PATH

e2e:     two ckpt_loop programs through one domain's socket; ckpt ls shows
         their domain; ckpt snapshot --domain; vm-save (workers gone, GPU
         memory freed); vm-restore check, then plan: both end with the
         uninterrupted checksum. A second generation; restoring the older one
         plans its snapshots and drops the sessions it does not hold; a
         corrupted chunk and a removed snapshot make vm-restore fail naming
         it; vm-snapshot while one session waits in a long synchronisation:
         the other is held (makes no call) until that wait is over; vm-drop
         frees; a restarted ternd listens for the domain again;
         vm-detach removes the socket.
         With --ivshmem, a /dev/shm file stands in for the domain's ivshmem
         BAR (ternd --ivshmem-dir, the programs' TERN_IVSHMEM): every domain
         session's rings are in a slot of it, across the saves, restores and
         ternd restarts, and the session on the plain socket is refused a
         slot and goes on over its stream.
ivshmem-hostile: a domain's guest lies to ternd about its ivshmem rings and
         pinned buffers (common/ivshmem_bar.h): ring sizes that do not fit,
         truncated requests, buffers in its rings, past its slot, unaligned,
         overflowing; every slot taken; a session that is not a domain's,
         and one of a domain without a BAR file (never given another's);
         its rings' counters scribbled on. Each fails alone: the session goes
         on (or, for the scribbled rings, only it ends), the others and
         ternd are unharmed.
hostile: hellos naming another domain's session or a "UUID/..." id on the
         plain socket; one domain's guest cannot reach another's session of
         the same name; part of a request in a session holds up neither
         vm-snapshot nor snapshot; bad uuids, generations and names in every op and
         truncated JSON are refused with a reason, and ternd goes on.
"""
import argparse
import glob
import mmap
import json
import grp
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'security'))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cuda'))
import hostile  # noqa: E402
import vm_standin  # noqa: E402

UUID_A = '01234567-89ab-cdef-0123-456789abcdef'
UUID_B = 'fedcba98-7654-3210-fedc-ba9876543210'
ITER, MARK = 240, 60


def fail(msg):
    print('FAIL: ' + msg, file=sys.stderr)
    sys.exit(1)


def control(path, req, timeout=120):
    """One request (a dict, or raw text sent as it is); the final reply."""
    r = hostile.control_request(path, req, timeout)
    if not r:
        fail('no answer to %r' % (req,))
    return r


def ok(path, req, timeout=120):
    r = control(path, req, timeout)
    if not r.get('ok'):
        fail('%r failed: %s' % (req, r))
    return r


def refused(path, req, why):
    r = control(path, req)
    if r.get('ok') or why not in r.get('error', ''):
        fail('%r: not refused with "%s": %s' % (req, why, r))


def sessions(path, uuid=None):
    st = ok(path, {'op': 'status'})
    return {e['id']: e for e in st['sessions'] if uuid is None or e.get('domain_uuid') == uuid}


def sessions_settled(path, uuid, done, timeout=10):
    """The domain's sessions once done(sessions) holds (workers being
    stopped are reaped a moment later), or the last seen."""
    t0 = time.time()
    while True:
        now = sessions(path, uuid)
        if done(now) or time.time() - t0 > timeout:
            return now
        time.sleep(0.05)


class Ternd:
    def __init__(self, args, tmp, extra=()):
        self.args, self.tmp = args, tmp
        self.control = os.path.join(tmp, 'control.sock')
        self.sock = os.path.join(tmp, 'ternd.sock')
        self.vm_dir = os.path.join(tmp, 'vm')
        self.state = os.path.join(tmp, 'state')
        self.log = os.path.join(tmp, 'ternd.log')
        cmd = [args.ternd, '--backend', 'sim', '--sim-kernels', args.plugin, '--sim-memory', '4G',
               '--listen', 'unix:' + self.sock, '--control', self.control, '--state-dir', self.state,
               '--vm-dir', self.vm_dir, '--log-file', self.log, '--log-level', 'info'] + list(extra) + \
            list(args.ternd_extra)
        if os.path.exists(self.control):
            os.unlink(self.control)
        self.proc = subprocess.Popen(cmd, start_new_session=True)
        for _ in range(500):
            if os.path.exists(self.control):
                return
            if self.proc.poll() is not None:
                fail('ternd exited with %d at start' % self.proc.returncode)
            time.sleep(0.02)
        fail('ternd did not start')

    def domain_socket(self, uuid):
        return os.path.join(self.vm_dir, uuid + '.sock')

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def Agent(args, tmp, domain_socket, name):
    """tern-agent of one domain, its port the domain's socket (the VM
    stand-in, tests/cuda/vm_standin.py); programs reach its .listen."""
    try:
        return vm_standin.Agent(args.agent, domain_socket, os.path.join(tmp, 'agent-%s.sock' % name),
                                os.path.join(tmp, 'agent-%s.log' % name))
    except vm_standin.StandinError as e:
        fail(str(e))


class App:
    """ckpt_loop reaching ternd through @server."""

    def __init__(self, args, tmp, server, session, argv):
        self.log = os.path.join(tmp, session + '.shim.log')
        env = dict(os.environ, LD_LIBRARY_PATH=args.shim_dir, TERN_SERVER='unix:' + server,
                   TERN_SESSION=session, TERN_LOG_FILE=self.log, TERN_LOG_LEVEL='info', **args.app_env)
        self.proc = subprocess.Popen([args.prog] + [str(a) for a in argv], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def checksum(self, timeout=120):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            fail('the app hung')
        if self.proc.returncode != 0:
            sys.stderr.write(err.decode()[-3000:])
            fail('the app failed (%d)' % self.proc.returncode)
        for l in out.decode().splitlines():
            if l.startswith('CHECKSUM '):
                return l.split()[1]
        fail('the app printed no checksum')


def wait_files(paths, timeout=60):
    t0 = time.time()
    while not all(os.path.exists(p) for p in paths):
        if time.time() - t0 > timeout:
            fail('timed out waiting for %s' % paths)
        time.sleep(0.02)


HOLD_SYNC_S = 6.0


def hold_together(args, t, path, want):
    """vm-snapshot while one session waits in a long cudaDeviceSynchronize:
    that worker holds only once its wait is over, and the other session,
    held at once, makes no call meanwhile. Nothing is copied before every
    worker holds. The wait is long and timed from its mark file, so that a
    loaded machine that starts one app late does not void the check."""
    marks = [os.path.join(t.tmp, 'hold.' + s) for s in ('w', 'r')]
    waiter = App(args, t.tmp, path, 'w', [ITER, MARK, marks[0], 10, MARK + 5, int(HOLD_SYNC_S * 1000)])
    runner = App(args, t.tmp, path, 'r', [ITER, MARK, marks[1], 20])
    wait_files([marks[0] + '.sync', marks[1]])
    result = {}
    op = threading.Thread(target=lambda: result.update(
        ok(t.control, {'op': 'vm-snapshot', 'domain': UUID_A, 'snapshot': 'held'})))
    t0 = time.time()
    waited = HOLD_SYNC_S - (t0 - os.stat(marks[0] + '.sync').st_mtime)
    if waited < 1.5 or runner.proc.poll() is not None:
        fail('the apps started too far apart to test the hold: %.1f s of the wait left, runner %s'
             % (waited, 'done' if runner.proc.poll() is not None else 'running'))
    op.start()
    time.sleep(0.3)
    calls = []
    while op.is_alive() and time.time() - t0 < waited - 0.2:
        calls.append(sessions(t.control, UUID_A)[UUID_A + '/r']['calls'])
        time.sleep(0.1)
    op.join(60)
    took = time.time() - t0
    if len(set(calls)) != 1 or len(calls) < 5 or took < waited - 0.3:
        fail('while one worker waited %.1f s, the other made calls %s (op took %.1f s)'
             % (waited, calls, took))
    if sorted(e['snapshot'] for e in result['snapshots']) != ['held-0', 'held-1']:
        fail('vm-snapshot: %s' % result)
    for app in (waiter, runner):
        if app.checksum() != want:
            fail('a held session did not end with the uninterrupted checksum')
    print('vm-snapshot held session r (calls %d throughout) until w\'s 2.5 s wait was over, '
          'took %.1f s; both ended with the uninterrupted checksum' % (calls[0], took))


def ivshmem_check(args, tmp, t, plain, domain):
    """The domain's sessions had their rings in the BAR, before and after
    the restore; the plain socket's session was refused a slot; the BAR's
    header is the host's layout."""
    for s in domain:
        log = open(os.path.join(tmp, s + '.shim.log'), errors='replace').read()
        if log.count('on ivshmem slot') < 2 or 'ivshmem channel to ternd' in log:
            fail('session %s did not use the BAR before and after the restore:\n%s' % (s, log[-2000:]))
    for s in plain:
        log = open(os.path.join(tmp, s + '.shim.log'), errors='replace').read()
        if 'on ivshmem slot' in log or 'no ivshmem slot from ternd' not in log:
            fail('the plain session %s was not refused a slot:\n%s' % (s, log[-2000:]))
    with open(args.bar, 'rb') as f:
        head = f.read(64)
    magic, version, hbytes, bar_bytes, slot_bytes, count = struct.unpack_from('<QIIQQI', head)
    if magic != 0x3152414253564954 or version != 1 or bar_bytes != os.path.getsize(args.bar) or \
            slot_bytes != 16 << 20 or count != 3:
        fail('the BAR header is not the host\'s layout: %r' % (head,))
    print('ivshmem: sessions %s on slots of the BAR before and after the restore; %s refused a slot; '
          'header: %d slots of %d MiB' % (domain, plain, count, slot_bytes >> 20))


def e2e(args, tmp):
    t = Ternd(args, tmp)
    agent = None
    try:
        want = App(args, tmp, t.sock, 'base', [ITER]).checksum()
        r = ok(t.control, {'op': 'vm-attach', 'uuid': UUID_A, 'name': 'guest-a'})
        path = t.domain_socket(UUID_A)
        if r['path'] != path or stat.S_IMODE(os.stat(path).st_mode) != 0o660:
            fail('vm-attach: %s, mode %o' % (r, stat.S_IMODE(os.stat(path).st_mode)))
        if ok(t.control, {'op': 'vm-attach', 'uuid': UUID_A, 'name': 'guest-a'})['path'] != path:
            fail('vm-attach is not idempotent')
        agent = Agent(args, tmp, path, 'a')
        guest = agent.listen
        marks = [os.path.join(tmp, 'mark.' + s) for s in 'ab']
        apps = [App(args, tmp, guest, s, [ITER, MARK, m, 10]) for s, m in zip('ab', marks)]
        wait_files(marks)
        live = sessions(t.control, UUID_A)
        if sorted(live) != [UUID_A + '/a', UUID_A + '/b'] or any(e.get('domain_name') != 'guest-a' for e in live.values()):
            fail('status does not show the domain\'s two sessions: %s' % live)
        p = subprocess.run([args.ckpt, '--control', t.control, '--state-dir', t.state, 'ls'],
                           capture_output=True, text=True, timeout=30)
        if 'DOMAIN' not in p.stdout or p.stdout.count('guest-a') != 2:
            fail('ckpt ls does not show the domain: %s %s' % (p.stdout, p.stderr))
        p = subprocess.run([args.ckpt, '--control', t.control, '--state-dir', t.state, '--json', 'snapshot',
                            '--domain', 'guest-a', 'pre'], capture_output=True, text=True, timeout=120)
        snap = json.loads(p.stdout) if p.returncode == 0 else {}
        if sorted(s['snapshot'] for s in snap.get('snapshots', [])) != ['pre-0', 'pre-1']:
            fail('ckpt snapshot --domain: %d %s %s' % (p.returncode, p.stdout, p.stderr))
        print('consistent snapshot of the domain:', snap['snapshots'])

        # A restore asked for before the save of its live sessions came
        # (libvirt's listener sends vm-save once `virsh save` is over) waits
        # for that save instead of failing or losing the sessions.
        early = {}
        waiter = threading.Thread(target=lambda: early.update(control(
            t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a', 'check': True})))
        waiter.start()
        time.sleep(0.5)
        if not waiter.is_alive():
            fail('a vm-restore before the save of its live sessions did not wait: %s' % early)
        g1 = ok(t.control, {'op': 'vm-save', 'uuid': UUID_A, 'generation': '1a'})
        waiter.join(30)
        if not early.get('ok') or early.get('snapshots') != g1['snapshots']:
            fail('the vm-restore that waited for the save answered %s' % early)
        print('a restore asked for before the save waited for it and then checked', len(g1['snapshots']),
              'snapshots')
        if len(g1['snapshots']) != 2:
            fail('vm-save: %s' % g1)
        time.sleep(0.3)
        after = sessions_settled(t.control, UUID_A, lambda s: all(e['memory'] == 0 for e in s.values()))
        if any(e['state'] != 'suspended' or e['memory'] != 0 for e in after.values()) or len(after) != 2:
            fail('after vm-save the sessions are not suspended with their GPU memory freed: %s' % after)
        print('saved generation 1a:', g1['snapshots'])
        # ternd restarts while the guests wait, their agent connected: the
        # new relay and the agent pair up again (a new epoch each, and
        # HELLOs of the old pairing ignored), and the restore goes on.
        t.stop()
        t = Ternd(args, tmp)
        ok(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a', 'check': True})
        ok(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a'})
        for app in apps:
            got = app.checksum()
            if got != want:
                fail('checksum after vm-save and vm-restore %s, uninterrupted %s' % (got, want))
        print('both programs ended with the uninterrupted checksum', want)
        if args.bar:
            ivshmem_check(args, tmp, t, ['base'], ['a', 'b'])

        # A second generation of another session; the older one restores its own.
        mark = os.path.join(tmp, 'mark.c')
        c = App(args, tmp, guest, 'c', [ITER, MARK, mark, 10])
        wait_files([mark])
        g2 = ok(t.control, {'op': 'vm-save', 'uuid': UUID_A, 'generation': '2b'})
        old = ok(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a', 'check': True})
        if old['snapshots'] != g1['snapshots'] or g2['snapshots'][0]['session'] != UUID_A + '/c':
            fail('generation 1a lists %s, 2b %s' % (old['snapshots'], g2['snapshots']))
        # The guest goes back to 1a's time: the program of 2b is no more.
        c.proc.kill()
        c.proc.wait()
        ok(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a'})
        planned = sessions_settled(t.control, UUID_A, lambda s: len(s) == 2)
        want_plan = {s['session']: s['snapshot'] for s in g1['snapshots']}
        if {k: e.get('snapshot') for k, e in planned.items()} != want_plan or \
                any(e['state'] != 'restoring' for e in planned.values()):
            fail('restoring generation 1a planned %s, not %s' % (planned, want_plan))
        print('the older generation plans its own snapshots, the newer session is dropped')

        # A removed snapshot, then a corrupt chunk: refused, naming it.
        gone = g2['snapshots'][0]['snapshot']
        p = subprocess.run([args.ckpt, '--state-dir', t.state, 'rm', '--force', gone],
                           capture_output=True, text=True, timeout=60)
        r = control(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '2b', 'check': True})
        if r.get('ok') or gone not in r.get('error', ''):
            fail('vm-restore of a removed snapshot: %s (rm: %s)' % (r, p.stderr))
        print('removed snapshot:', r['error'])
        hostile.store_packs_damage(t.state)
        r = control(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a', 'check': True})
        if r.get('ok') or not any(s['snapshot'] in r.get('error', '') for s in g1['snapshots']):
            fail('vm-restore of a corrupt generation: %s' % r)
        print('corrupt chunk:', r['error'])

        hold_together(args, t, guest, want)
        r = ok(t.control, {'op': 'vm-drop', 'uuid': UUID_A})
        if sessions_settled(t.control, UUID_A, lambda s: not s):
            fail('vm-drop left sessions: %s' % sessions(t.control, UUID_A))
        # A restarted ternd listens for the attached domain again.
        t.stop()
        if os.path.exists(path):
            fail('the domain socket outlived ternd')
        t = Ternd(args, tmp)
        for _ in range(100):
            if os.path.exists(path):
                break
            time.sleep(0.05)
        else:
            fail('a restarted ternd does not listen for the domain again')
        r = ok(t.control, {'op': 'vm-detach', 'uuid': UUID_A})
        if r.get('uuid') != UUID_A or os.path.exists(path):
            fail('vm-detach left the socket')
        # Its generations stay for a restore after the release (1a's chunk is corrupt).
        r = control(t.control, {'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1a', 'check': True})
        if r.get('ok') or 'snapshot' not in r.get('error', '') or 'no saved GPU state' in r['error']:
            fail('after vm-detach the generations are gone: %s' % r)
        print('vm-drop, restart and vm-detach: ok')
    finally:
        t.stop()
        if agent:
            agent.stop()
    return 0


CALL_IVSHMEM_ATTACH, CALL_IVSHMEM_HOST_SHARE = 115, 116
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_SUPPORTED = 1, 2, 801
RING = 64 << 10
SLOT = 1 << 20


class Rings:
    """The guest's end of shm_chan's rings in a slot of the BAR (the layout
    of common/shm_chan.c: magic, ring size, two sleeping flags, then each
    ring's tail and head a cache line apart; the data from 4096). It never
    sleeps, and rings the doorbell (a byte on the stream) after each send."""

    def __init__(self, bar, offset, sock):
        self.m, self.at, self.sock = bar, offset, sock
        self.tail = self.u64(192)
        self.head = self.u64(384)

    def u64(self, off):
        return struct.unpack_from('<Q', self.m, self.at + off)[0]

    def put64(self, off, v):
        struct.pack_into('<Q', self.m, self.at + off, v)

    def send(self, data):
        pos = self.tail % RING
        first = min(len(data), RING - pos)
        base = self.at + 4096
        self.m[base + pos:base + pos + first] = data[:first]
        self.m[base:base + len(data) - first] = data[first:]
        self.tail += len(data)
        self.put64(192, self.tail)
        self.sock.sendall(b'w')

    def recv(self, n, timeout=10):
        t0 = time.time()
        while self.u64(320) - self.head < n:
            if time.time() - t0 > timeout:
                return None
        base = self.at + 4096 + RING
        pos = self.head % RING
        first = min(n, RING - pos)
        data = bytes(self.m[base + pos:base + pos + first]) + bytes(self.m[base:base + n - first])
        self.head += n
        self.put64(384, self.head)
        return data

    def call(self, call, payload, seq=0):
        self.send(hostile.frame(call, payload, seq=seq))
        head = self.recv(hostile.HEADER.size)
        if head is None:
            return None, b''
        length = hostile.HEADER.unpack(head)[4]
        body = self.recv(length)
        return struct.unpack_from('<I', body)[0], body[4:]


def ivshmem_attach(sock, payload):
    sock.sendall(hostile.frame(CALL_IVSHMEM_ATTACH, payload))
    call, status, rest = hostile.reply_read(sock)
    return status, rest


def ivshmem_hostile(args, tmp):
    bar_dir = tempfile.mkdtemp(prefix='tern-vmhost-bar-', dir='/dev/shm')
    bar_path = os.path.join(bar_dir, 'tern-' + UUID_A)
    with open(bar_path, 'wb') as f:
        f.truncate(4096 + 2 * SLOT)
    t = hostile.Ternd(args.ternd, args=['--vm-dir', os.path.join(tmp, 'vm'), '--ivshmem-dir', bar_dir,
                                        '--ivshmem-slot', str(SLOT)], tcp=False)
    agents = []
    try:
        ok(t.control, {'op': 'vm-attach', 'uuid': UUID_A, 'name': 'a'})
        agents.append(Agent(args, tmp, os.path.join(tmp, 'vm', UUID_A + '.sock'), 'a'))
        agent = agents[0]
        url = 'unix:' + agent.listen
        x = hostile.hello(url, 'x')
        if x.status != hostile.CUDA_SUCCESS:
            fail('hello: %s' % x.status)
        bad = [(struct.pack('<QI', 3, 0xffffffff), 'ring size not a power of two'),
               (struct.pack('<QI', SLOT, 0xffffffff), 'rings larger than the slot'),
               (struct.pack('<QI', 1 << 40, 0xffffffff), 'rings beyond any limit'),
               (struct.pack('<Q', RING), 'a truncated request')]
        for n, (payload, what) in enumerate(bad):
            status, _ = ivshmem_attach(x.sock, payload)
            if status != CUDA_ERROR_INVALID_VALUE or not hostile.alive(x.sock, n + 1):
                fail('ivshmem_attach with %s: %d, or the session died' % (what, status))
        plain = hostile.hello(t.unix, 'p')
        status, _ = ivshmem_attach(plain.sock, struct.pack('<QI', RING, 0xffffffff))
        if status != CUDA_ERROR_NOT_SUPPORTED or not hostile.alive(plain.sock, 1):
            fail('a session on the plain socket was given a slot: %d' % status)
        # Domain B has no BAR file: its guest gets none, never A's.
        ok(t.control, {'op': 'vm-attach', 'uuid': UUID_B, 'name': 'b'})
        agents.append(Agent(args, tmp, os.path.join(tmp, 'vm', UUID_B + '.sock'), 'b'))
        agent_b = agents[1]
        other = hostile.hello('unix:' + agent_b.listen, 'x')
        status, _ = ivshmem_attach(other.sock, struct.pack('<QI', RING, 0xffffffff))
        if status != CUDA_ERROR_NOT_SUPPORTED or not hostile.alive(other.sock, 1):
            fail('domain B, which has no BAR, was given a slot (of A\'s?): %d' % status)
        print('ivshmem_attach: %d bad requests refused, the session goes on; the plain socket and domain B (no BAR file) get none' % len(bad))

        # Two slots: x and y take them, z is refused and stays on its stream.
        status, rest = ivshmem_attach(x.sock, struct.pack('<QI', RING, 1))
        slot, offset, nbytes, ring = struct.unpack_from('<IQQQ', rest)
        if status != hostile.CUDA_SUCCESS or (slot, offset, nbytes, ring) != (1, 4096 + SLOT, SLOT, RING):
            fail('ivshmem_attach asking for slot 1: %d %s' % (status, (slot, offset, nbytes, ring)))
        y = hostile.hello(url, 'y')
        status, rest = ivshmem_attach(y.sock, struct.pack('<QI', RING, 1))
        yslot, yoffset = struct.unpack_from('<IQ', rest)
        if status != hostile.CUDA_SUCCESS or yslot != 0:
            fail('the second session asking for a held slot got %d slot %d' % (status, yslot))
        z = hostile.hello(url, 'z')
        status, _ = ivshmem_attach(z.sock, struct.pack('<QI', RING, 0xffffffff))
        if status != CUDA_ERROR_OUT_OF_MEMORY or not hostile.alive(z.sock, 1):
            fail('a third session with every slot held: %d, or it died' % status)
        print('slots: x asked for 1 and got it, y asking for 1 got 0, z found none and stays on its stream')

        fd = os.open(bar_path, os.O_RDWR)
        bar = mmap.mmap(fd, 4096 + 2 * SLOT)
        os.close(fd)
        rx = Rings(bar, offset, x.sock)
        carve = 4096 + 2 * RING
        page = 4096
        addr = 0x7e0000000000
        shares = [
            (addr, 0, page, 'in the slot\'s ring header'),
            (addr, 4096 + RING, page, 'in its rings'),
            (addr, SLOT, page, 'past the slot (in the next one)'),
            (addr, SLOT - page, 2 * page, 'running past the slot'),
            (addr, carve, (1 << 64) - page, 'an overflowing size'),
            (addr, (1 << 64) - page, 2 * page, 'an overflowing offset'),
            (addr, carve + 1, page, 'an unaligned offset'),
            (addr, carve, 0, 'no bytes'),
            (addr + 1, carve, page, 'an unaligned address'),
            (addr, carve, page + 1, 'an unaligned size'),
        ]
        for a, off, n, what in shares:
            status, _ = rx.call(CALL_IVSHMEM_HOST_SHARE, struct.pack('<QQQI', a, off, n, 0))
            if status != CUDA_ERROR_INVALID_VALUE:
                fail('ivshmem_host_share %s: %s' % (what, status))
        status, rest = rx.call(CALL_IVSHMEM_HOST_SHARE, struct.pack('<QQQI', addr, carve, 4 * page, 0))
        if status != hostile.CUDA_SUCCESS:
            fail('a pinned buffer in the slot was refused: %s' % status)
        status, _ = rx.call(CALL_IVSHMEM_HOST_SHARE, struct.pack('<QQQI', addr + page, carve, page, 0))
        if status != CUDA_ERROR_INVALID_VALUE:
            fail('a buffer overlapping a shared one was accepted: %s' % status)
        status, _ = rx.call(hostile.CALL_DEVICE_GET_COUNT, b'', seq=1)
        if status != hostile.CUDA_SUCCESS:
            fail('the session on the rings does not answer after the bad shares: %s' % status)
        print('ivshmem_host_share: %d buffers outside the slot\'s free part refused; one inside taken; '
              'the session answers on its rings' % (len(shares) + 1))

        # x scribbles on its rings' counters: only x's session ends.
        bar[offset + 16:offset + 4096] = b'\x7f' * (4096 - 16)
        x.sock.sendall(b'w')
        deadline = time.time() + 10
        while x.worker_pid in [e.get('pid') for e in sessions(t.control).values()] and time.time() < deadline:
            time.sleep(0.05)
        if x.worker_pid in [e.get('pid') for e in sessions(t.control).values()]:
            fail('the session with scribbled rings is still served')
        ry = Rings(bar, yoffset, y.sock)
        if ry.call(hostile.CALL_DEVICE_GET_COUNT, b'', seq=1)[0] != hostile.CUDA_SUCCESS or \
                not hostile.alive(z.sock, 2) or t.proc.poll() is not None:
            fail('another session or ternd was harmed by x\'s scribbled rings')
        print('x scribbled on its rings: the others and ternd go on')
        bar.close()
        for h in (x, y, z, plain, other):
            h.sock.close()
    finally:
        for a in agents:
            a.stop()
        t.stop()
        shutil.rmtree(bar_dir, ignore_errors=True)
    return 0


def host_function_joins(a, b, mine):
    """Host-function connections (host_func_join) reach only their own
    session's worker, with its secret, once: @mine is session x of domain
    A, whose agent is @a; @b is domain B's."""
    j = hostile.join
    zero = bytes(32)
    for url, sid, sec, raw, want, what in (
            (a, 'x', zero, None, hostile.CUDA_ERROR_NOT_PERMITTED, 'no join awaited'),
            (a, 'nobody', zero, None, hostile.CUDA_ERROR_NOT_FOUND, 'no such session'),
            (b, UUID_A + '/x', zero, None, hostile.CUDA_ERROR_NOT_PERMITTED, "another domain's id"),
            (a, 'x', bytes(31), None, hostile.CUDA_ERROR_INVALID_VALUE, 'a short secret'),
            (a, 'x', None, hostile.blob(b'x')[:3], hostile.CUDA_ERROR_INVALID_VALUE, 'a truncated join'),
            (a, 'x', None, hostile.blob(b'x') + hostile.blob(zero) + b'!', hostile.CUDA_ERROR_INVALID_VALUE,
             'bytes after the join')):
        status, s = j(url, sid, sec, raw)
        if status != want:
            fail('a join with %s: status %s, expected %d' % (what, status, want))
    secret = hostile.join_secret(mine.sock)
    if len(secret) != 32:
        fail('host_func_attach (join) answered a secret of %d bytes' % len(secret))
    for url, sid, sec, want, what in (
            (a, 'x', secret[:-1] + bytes([secret[-1] ^ 1]), hostile.CUDA_ERROR_NOT_PERMITTED, 'a wrong secret'),
            # B's "x" is B's own session, which awaits no join.
            (b, 'x', secret, hostile.CUDA_ERROR_NOT_PERMITTED, "the secret through domain B's channel")):
        status, s = j(url, sid, sec)
        if status != want:
            fail('a join with %s: status %s, expected %d' % (what, status, want))
    status, chan = j(a, 'x', secret)
    if status != hostile.CUDA_SUCCESS or chan is None:
        fail('the join with the secret of A/x was refused: %s' % status)
    status, s = j(a, 'x', secret)
    if status != hostile.CUDA_ERROR_NOT_PERMITTED:
        fail('a second join with the same secret: status %s' % status)
    if not hostile.alive(mine.sock, 2):
        fail('session A/x does not answer after the joins')
    chan.close()
    print('host-function joins: none awaited, no session, another domain\'s, short, truncated, overlong, '
          'wrong secret, right secret on the wrong domain, a second one: refused; the right one taken')


def half_requests(t, mine, plain):
    """A guest that sends part of a request and stops (paused by a save, or
    on purpose) holds up neither its domain's vm-snapshot nor a plain
    session's snapshot: the boundary is before that request, and once the
    rest comes it is served."""
    req = hostile.frame(hostile.CALL_DEVICE_GET_COUNT, seq=7)
    for h, op, cut in ((mine, {'op': 'vm-snapshot', 'domain': UUID_A, 'snapshot': 'half'}, 20),
                       (plain, {'op': 'snapshot', 'session': 'x', 'snapshot': 'half-plain'}, 5)):
        h.sock.sendall(req[:cut])
        time.sleep(0.2)
        t0 = time.time()
        r = control(t.control, op, timeout=20)
        if not r.get('ok'):
            fail('%s with half a request in the session: %s' % (op['op'], r))
        h.sock.sendall(req[cut:])
        call, status, _ = hostile.reply_read(h.sock)
        if call != hostile.CALL_DEVICE_GET_COUNT or status != hostile.CUDA_SUCCESS or not hostile.alive(h.sock, 8):
            fail('the request completed after %s was not served (call %d, status %d)' % (op['op'], call, status))
        print('%s with %d of a request\'s %d bytes in: done in %.2f s; the rest then served'
              % (op['op'], cut, len(req), time.time() - t0))


def hostile_suite(args, tmp):
    # QEMU's group for the domain sockets alone (daemon stands in for
    # libvirt-qemu): the control socket stays root's.
    t = hostile.Ternd(args.ternd, args=['--vm-dir', os.path.join(tmp, 'vm'), '--vm-socket-group', 'daemon'],
                      tcp=False)
    try:
        for u, n in ((UUID_A, 'a'), (UUID_B, 'b')):
            ok(t.control, {'op': 'vm-attach', 'uuid': u, 'name': n})
        st, ctl = os.stat(os.path.join(tmp, 'vm', UUID_A + '.sock')), os.stat(t.control)
        if st.st_gid != grp.getgrnam('daemon').gr_gid or stat.S_IMODE(st.st_mode) != 0o660 or \
                stat.S_IMODE(ctl.st_mode) != 0o600 or ctl.st_gid == st.st_gid:
            fail('--vm-socket-group: domain socket gid %d mode %o, control gid %d mode %o'
                 % (st.st_gid, stat.S_IMODE(st.st_mode), ctl.st_gid, stat.S_IMODE(ctl.st_mode)))
        print('--vm-socket-group: the domain sockets are root:daemon 0660, the control socket 0600 and not theirs')
        agents = [Agent(args, tmp, os.path.join(tmp, 'vm', u + '.sock'), u) for u in (UUID_A, UUID_B)]
        a, b = ('unix:' + g.listen for g in agents)
        for url, sid in ((t.unix, UUID_A + '/x'), (a, UUID_B + '/x'), (a, 'x/y')):
            h = hostile.hello(url, sid)
            if h.status == hostile.CUDA_SUCCESS:
                fail('a hello on %s naming %s was accepted' % (url, sid))
        print('hellos naming a domain session id ("UUID/...") refused on the plain socket and on a domain\'s')
        mine = hostile.hello(a, 'x')
        theirs = hostile.hello(b, 'x')
        plain = hostile.hello(t.unix, 'x')
        if any(h.status != hostile.CUDA_SUCCESS for h in (mine, theirs, plain)):
            fail('hellos for "x": %s %s %s' % (mine.status, theirs.status, plain.status))
        live = sessions(t.control)
        want = {UUID_A + '/x': UUID_A, UUID_B + '/x': UUID_B, 'x': ''}
        if {k: live[k].get('domain_uuid', '') for k in live} != want:
            fail('three guests naming "x" are not three sessions: %s' % live)
        if mine.worker_pid == theirs.worker_pid or not hostile.alive(mine.sock, 1):
            fail('domain B\'s guest reached domain A\'s session')
        again = hostile.hello(a, 'x')
        if again.status == hostile.CUDA_SUCCESS:
            fail('a second guest on domain A took session x without its credential')
        print('"x" is three sessions: one per domain and one plain; none reaches another')
        host_function_joins(a, b, mine)
        half_requests(t, mine, plain)
        for h in (mine, theirs, plain):
            h.sock.close()

        long_name = 'n' * 201
        bad = [
            ({'op': 'vm-attach', 'uuid': UUID_A.upper(), 'name': 'n'}, 'not a domain uuid'),
            ({'op': 'vm-attach', 'uuid': UUID_A[:-1], 'name': 'n'}, 'not a domain uuid'),
            ({'op': 'vm-attach', 'uuid': '../../../../etc/passwd-0000-0000-00', 'name': 'n'}, 'not a domain uuid'),
            ({'op': 'vm-attach', 'uuid': UUID_A, 'name': 'a/b'}, 'not a domain name'),
            ({'op': 'vm-attach', 'uuid': UUID_A, 'name': 'a\nb'}, 'not a domain name'),
            ({'op': 'vm-attach', 'uuid': UUID_A, 'name': long_name}, 'longer than 200 bytes'),
            ({'op': 'vm-attach', 'uuid': UUID_A}, '"name" is missing'),
            ({'op': 'vm-detach', 'uuid': 'x'}, 'not a domain uuid'),
            ({'op': 'vm-drop', 'uuid': ''}, 'is empty'),
            ({'op': 'vm-save', 'uuid': UUID_A, 'generation': 'G1'}, 'not a generation'),
            ({'op': 'vm-save', 'uuid': UUID_A, 'generation': '../1'}, 'not a generation'),
            ({'op': 'vm-save', 'uuid': UUID_A, 'generation': 'a' * 65}, 'longer than 64 bytes'),
            ({'op': 'vm-save', 'uuid': 'fedcba98-7654-3210-fedc-000000000000', 'generation': '1'}, 'not attached'),
            ({'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1', 'check': 'yes'}, 'not true or false'),
            ({'op': 'vm-restore', 'uuid': UUID_A + ' ', 'generation': '1'}, 'longer than 36 bytes'),
            ({'op': 'vm-restore', 'uuid': UUID_A.replace('-', '_'), 'generation': '1'}, 'not a domain uuid'),
            ({'op': 'vm-restore', 'uuid': UUID_A, 'generation': ''}, 'is empty'),
            ({'op': 'vm-restore', 'uuid': UUID_A, 'generation': '1/../2'}, 'not a generation'),
            ({'op': 'vm-drop', 'uuid': UUID_A, 'generation': '1'}, 'unknown member'),
            ({'op': 'vm-snapshot', 'domain': long_name}, 'longer than 200 bytes'),
            ({'op': 'vm-snapshot', 'domain': 'a', 'snapshot': 'p' * 240}, 'invalid snapshot prefix'),
            ({'op': 'vm-restore', 'uuid': UUID_A, 'generation': 'ff'}, 'no GPU state saved under generation ff'),
            ({'op': 'vm-restore', 'uuid': 'fedcba98-7654-3210-fedc-000000000000', 'generation': '1'},
             'no saved GPU state'),
            ({'op': 'vm-snapshot', 'domain': 'nobody'}, 'not attached'),
            ({'op': 'vm-snapshot', 'domain': 'a', 'snapshot': '.hidden'}, 'invalid snapshot prefix'),
            ({'op': 'vm-snapshot', 'domain': 'a', 'uuid': UUID_A}, 'unknown member'),
            ('{"op":"vm-save","uuid":"%s","generation":"1' % UUID_A, 'truncated'),
            ('{"op":"vm-attach","uuid":7,"name":"n"}\n', 'not a string'),
            ('[1]\n', 'not a JSON object'),
        ]
        for req, why in bad:
            refused(t.control, req if isinstance(req, dict) else req + ('\n' if not req.endswith('\n') else ''), why)
        st = ok(t.control, {'op': 'status'})
        if st['pid'] != t.proc.pid or t.proc.poll() is not None:
            fail('ternd did not survive the bad requests')
        print('%d malformed or hostile vm requests refused with a reason; ternd unharmed' % len(bad))
        ok(t.control, {'op': 'vm-drop', 'uuid': UUID_A})
        if sessions_settled(t.control, UUID_A, lambda s: not s):
            fail('vm-drop left domain A\'s session')
        for g in agents:
            g.stop()
    finally:
        t.stop()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('scenario', choices=['e2e', 'hostile', 'ivshmem-hostile'])
    ap.add_argument('--ternd', required=True)
    ap.add_argument('--agent', required=True)
    ap.add_argument('--shim-dir')
    ap.add_argument('--prog')
    ap.add_argument('--plugin')
    ap.add_argument('--ckpt')
    ap.add_argument('--ivshmem', action='store_true')
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix='tern-vmhost-')
    args.ternd_extra, args.app_env, args.bar, bar_dir = [], {}, None, None
    if args.ivshmem:
        # The BAR: libvirt's /dev/shm/tern-UUID for <shmem name='tern-UUID'>, 64 MiB.
        bar_dir = tempfile.mkdtemp(prefix='tern-vmhost-bar-', dir='/dev/shm')
        args.bar = os.path.join(bar_dir, 'tern-' + UUID_A)
        with open(args.bar, 'wb') as f:
            f.truncate(64 << 20)
        args.ternd_extra = ['--ivshmem-dir', bar_dir, '--ivshmem-slot', '16M']
        args.app_env = {'TERN_IVSHMEM': args.bar}
    try:
        rc = {'e2e': e2e, 'hostile': hostile_suite, 'ivshmem-hostile': ivshmem_hostile}[args.scenario](args, tmp)
    except SystemExit:
        for log in glob.glob(os.path.join(tmp, '*.log')):
            sys.stderr.write('--- %s\n%s\n' % (log, open(log, errors='replace').read()[-4000:]))
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    if bar_dir:
        shutil.rmtree(bar_dir, ignore_errors=True)
    print('PASS')
    return rc


if __name__ == '__main__':
    sys.exit(main())
