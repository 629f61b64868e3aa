#!/usr/bin/env python3
"""Operator safety (issue 12, items 6 and 7): what a careless operator does
to a ternd on the sim backend, and what must hold afterwards.

    test_operator.py --ternd T --ckpt C --shim-dir D --prog CKPT_LOOP --plugin SO

Each part prints the figure that shows it:
  rm-checks        `ckpt rm` of a suspended session's snapshot, of a parent, and
                   `rm base nosuch`: refused, nothing removed, resume still works
  second-ternd     a second ternd on the same state dir exits at once, the first
                   keeps its sockets (same inodes) and answers
  sessions-file    suspended sessions survive a ternd restart; --incremental
                   works after it; a damaged, truncated, hostile or over-limit
                   sessions file stops ternd with a clear error
  sessions-max     with --sessions-max 2 the third suspend is refused loudly, the
                   first two stay resumable
  half-snapshot    ternd and its workers killed mid-snapshot: ls never lists the
                   half-written snapshot, even while the store is in use, and a
                   new snapshot of the same name succeeds
  names            a 200-byte session id and a 250-byte snapshot name work end to
                   end; 251 bytes: "name too long (max 250)"; a snapshot named -x
                   is addressed after `--`
  pack-missing     a deleted pack is reported as "pack missing", naming it

Loopback only (unix sockets in a temporary folder), bounded loops.
"""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'unit', 'cli'))
from checks import check  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402

ARGS = None


class Ternd:
    def __init__(self, tmp, state, tag='t'):
        self.tmp, self.state = tmp, state
        self.sock = os.path.join(tmp, tag + '.sock')
        self.control = os.path.join(tmp, tag + '.control')
        self.log = os.path.join(tmp, tag + '.log')
        self.proc = None

    def cmd(self, extra=()):
        return [ARGS.ternd, '--backend', 'sim', '--sim-kernels', ARGS.plugin, '--listen', 'unix:' + self.sock,
                '--control', self.control, '--state-dir', self.state, '--log-file', self.log,
                '--log-level', 'info'] + list(extra)

    def start(self, extra=()):
        if os.path.exists(self.control):
            os.unlink(self.control)
        self.proc = subprocess.Popen(self.cmd(extra), start_new_session=True)
        for _ in range(500):
            if os.path.exists(self.control):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def kill_all(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        time.sleep(0.3)

    def log_tail(self):
        try:
            return open(self.log, errors='replace').read()[-3000:]
        except OSError:
            return ''

    def ckpt(self, *words, timeout=120):
        """(exit status, JSON object, stderr) of `ckpt WORDS --json`."""
        p = subprocess.run([ARGS.ckpt, '--control', self.control, '--state-dir', self.state, '--json']
                           + list(words), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        try:
            obj = json.loads(p.stdout) if p.stdout.strip() else {}
        except ValueError:
            obj = {'unparsed': p.stdout}
        return p.returncode, obj, p.stderr

    def raw(self, req):
        return hostile.control_request(self.control, req)


class App:
    def __init__(self, t, session, iters=100000, extra_mb=0):
        self.mark = os.path.join(t.tmp, 'mark-%d' % abs(hash(session)))
        if os.path.exists(self.mark):
            os.unlink(self.mark)
        env = dict(os.environ, LD_LIBRARY_PATH=ARGS.shim_dir, TERN_SERVER='unix:' + t.sock,
                   TERN_SESSION=session, TERN_LOG_FILE=os.path.join(t.tmp, 'shim-%d.log' % abs(hash(session))),
                   TERN_LOG_LEVEL='warn', TERN_TEST_EXTRA_MB=str(extra_mb), TERN_RECONNECT_TIMEOUT_MS='20000')
        self.proc = subprocess.Popen([ARGS.prog, str(iters), '2', self.mark, '10'], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready(self, timeout=60):
        t0 = time.time()
        while not os.path.exists(self.mark):
            if self.proc.poll() is not None or time.time() - t0 > timeout:
                return False
            time.sleep(0.02)
        return True

    def end(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def sessions_of(t):
    rc, obj, _ = t.ckpt('ls')
    return {s['id']: s for s in obj.get('sessions', [])}


def snapshots_of(t):
    rc, obj, _ = t.ckpt('ls')
    return {s['name']: s for s in obj.get('snapshots', [])}


def session_up(tmp, state_name, session, extra_mb=0):
    """A ternd on a fresh state dir and one app running in it."""
    t = Ternd(tmp, os.path.join(tmp, state_name))
    check(t.start(), 'ternd starts (%s)' % state_name, t.log_tail())
    app = App(t, session, extra_mb=extra_mb)
    check(app.ready(timeout=120), 'the app %s runs' % session[:20])
    return t, app


# ---------------------------------------------------------------------------

def part_rm_checks(tmp):
    t, app = session_up(tmp, 'state-rm', 'rm1')
    try:
        rc, obj, err = t.ckpt('snapshot', 'rm1', '--name', 'base')
        check(rc == 0, 'snapshot base', err)
        rc, obj, err = t.ckpt('snapshot', 'rm1', '--name', 'inc', '--incremental')
        check(rc == 0 and obj.get('parent') == 'base', 'incremental inc on base', str(obj) + err)
        rc, obj, err = t.ckpt('suspend', 'rm1')
        parked = obj.get('snapshot', '')
        check(rc == 0 and parked, 'suspend rm1', err)

        refused = 0
        rc, obj, err = t.ckpt('rm', parked)
        refused += rc == 1
        check(rc == 1 and 'suspended in' in err and 'nothing was removed' in err,
              "rm of the suspended session's snapshot is refused", err)
        rc, obj, err = t.ckpt('rm', 'base', 'nosuch')
        refused += rc == 1
        check(rc == 1 and "'nosuch' not found" in err and 'nothing was removed' in err,
              'rm base nosuch names nosuch and removes nothing', err)
        rc, obj, err = t.ckpt('rm', 'base')
        refused += rc == 1
        check(rc == 1 and "parent of 'inc'" in err, 'rm of a parent is refused', err)
        rc, obj, err = t.ckpt('rm', 'nosuch', parked, '--force')
        refused += rc == 1
        check(rc == 1 and "'nosuch' not found" in err, 'even --force checks every name first', err)
        snaps = snapshots_of(t)
        check(all(n in snaps and snaps[n]['complete'] for n in ('base', 'inc', parked)),
              'every snapshot is still there and complete', str(list(snaps)))
        for bad in ('', '.hidden', 'a/b', 'x' * 251, 'sp ace'):
            rc, obj, err = t.ckpt('rm', 'base', bad)
            check(rc == 2 and 'not a valid snapshot name' in err, 'rm refuses the name %r' % bad[:20], err)
        print('rm-checks: %d refusals, 0 snapshots lost' % refused)

        rc, obj, err = t.ckpt('resume', 'rm1')
        check(rc == 0, 'the suspended session resumes from the snapshot rm kept', err + t.log_tail())
        time.sleep(0.3)
        check(app.proc.poll() is None, 'the app runs on after the resume')
        rc, obj, err = t.ckpt('rm', 'base', 'inc')
        check(rc == 0 and obj.get('ok') is True, 'a parent goes together with its child', str(obj) + err)
    finally:
        app.end()
        t.stop()


def part_second_ternd(tmp):
    state = os.path.join(tmp, 'state-two')
    t = Ternd(tmp, state, 'first')
    check(t.start(), 'the first ternd starts', t.log_tail())
    try:
        inode = (os.stat(t.sock).st_ino, os.stat(t.control).st_ino)
        # Same state dir, same sockets, then other sockets: both refused.
        for tag, same in (('same-sockets', True), ('other-sockets', False)):
            u = Ternd(tmp, state, 'first' if same else 'second')
            u.log = os.path.join(tmp, tag + '.log')
            t0 = time.time()
            p = subprocess.Popen(u.cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()        # it took over: what the lock is there to stop
                p.wait()
            took = time.time() - t0
            log = open(u.log, errors='replace').read() if os.path.exists(u.log) else ''
            check(p.returncode > 0 and 'another ternd (pid %d)' % t.proc.pid in log
                  and 'uses the state directory' in log and 'its lock is open in %d (ternd)' % t.proc.pid in log,
                  'a second ternd (%s) exits with a clear error naming the lock\'s holder' % tag, log[-800:])
            check(took < 5, 'it exits at once (%s: %.2f s)' % (tag, took))
            print('second-ternd (%s): exit %d after %.2f s' % (tag, p.returncode, took))
            if not same:
                check(not os.path.exists(u.sock) and not os.path.exists(u.control),
                      'the refused ternd made no sockets')
        check(t.proc.poll() is None, 'the first ternd still runs')
        check((os.stat(t.sock).st_ino, os.stat(t.control).st_ino) == inode,
              "the first ternd's sockets are untouched (same inodes)")
        rc, obj, err = t.ckpt('ls')
        check(rc == 0 and obj.get('ternd') is True and obj.get('ternd_pid') == t.proc.pid,
              'the first ternd still answers', str(obj) + err)
    finally:
        t.stop()
    # Once it is gone, the state dir is free again.
    u = Ternd(tmp, state, 'third')
    check(u.start(), 'a ternd starts on the state dir once the first stopped', u.log_tail())
    u.stop()


SESSIONS_MAGIC = b'TRNSSESS'
SESSIONS_MIN_BYTES = 16 + 16 + 8 + 6     # header, trailer, one entry


def part_sessions_file(tmp):
    t, app = session_up(tmp, 'state-sessions', 'keep1')
    state = t.state
    other = App(t, 'keep2')
    try:
        check(other.ready(), 'the app keep2 runs')
        rc, obj, err = t.ckpt('snapshot', 'keep2', '--name', 'keep2-full')
        check(rc == 0, 'snapshot keep2-full', err)
        other.end()
        rc, obj, err = t.ckpt('snapshot', 'keep1', '--name', 'keep1-full')
        check(rc == 0, 'snapshot keep1-full', err)
        rc, obj, err = t.ckpt('suspend', 'keep1')
        parked = obj.get('snapshot', '')
        check(rc == 0, 'suspend keep1', err)
        t.stop()
        path = os.path.join(state, 'sessions')
        good = open(path, 'rb').read() if os.path.exists(path) else b''
        check(good.startswith(SESSIONS_MAGIC), 'STATE/sessions is written', repr(good[:16]))

        check(t.start(), 'ternd restarts on the state dir', t.log_tail())
        s = sessions_of(t).get('keep1', {})
        check(s.get('state') == 'suspended' and s.get('snapshot') == parked,
              'after the restart keep1 is still suspended in its snapshot', str(s))
        rc, obj, err = t.ckpt('resume', 'keep1')
        check(rc == 0, 'keep1 resumes in the restarted ternd', err + t.log_tail())
        rc, obj, err = t.ckpt('snapshot', 'keep1', '--name', 'keep1-inc', '--incremental')
        check(rc == 0 and obj.get('parent') == parked,
              '--incremental after the restart takes the session\'s latest snapshot', str(obj) + err)
        print('sessions-file: suspended across a restart, incremental on %s (%s new chunks of %s)'
              % (obj.get('parent'), obj.get('new_chunks'), obj.get('chunks')))
        # keep2 was only snapshotted: its guest comes back to the new ternd
        # as a new worker, and its incremental snapshot builds on the store's.
        other = App(t, 'keep2')
        check(other.ready(), 'keep2 runs again after the restart')
        rc, obj, err = t.ckpt('snapshot', 'keep2', '--name', 'keep2-inc', '--incremental')
        check(rc == 0 and obj.get('parent') == 'keep2-full',
              '--incremental after a restart builds on the store\'s snapshot of the session', str(obj) + err)
        rc, obj, err = t.ckpt('verify', 'keep2-inc')
        check(rc == 0, 'and it verifies', err)
        print('sessions-file: keep2 incremental after the restart on %s' % obj.get('snapshot'))
    finally:
        app.end()
        other.end()
        t.stop()

    # Hostile files: each one stops ternd with a clear error, never a crash.
    if len(good) < SESSIONS_MIN_BYTES:
        check(False, 'a sessions file to damage', repr(good[:40]))
        return
    n = struct.unpack_from('<I', good, 12)[0]
    cases = {
        'flipped byte': good[:20] + bytes([good[20] ^ 1]) + good[21:],
        'truncated': good[:len(good) // 2],
        'empty': b'',
        'magic only': SESSIONS_MAGIC,
        'other magic': b'TRNSXXXX' + good[8:],
        'garbage': os.urandom(300),
        'huge count': good[:12] + struct.pack('<I', 0xffffffff) + good[16:],
        'trailing bytes': good + b'\0' * 7,
    }
    ver = bytearray(good)
    struct.pack_into('<I', ver, 8, 99)
    cases['version 99'] = bytes(ver)
    clean = 0
    for what, data in cases.items():
        with open(path, 'wb') as f:
            f.write(data)
        p = subprocess.run(t.cmd(), capture_output=True, text=True, timeout=30)
        log = open(t.log, errors='replace').read()[-2000:]
        ok = p.returncode == 1 and 'sessions file' in log and 'move it aside' in log and p.returncode >= 0
        clean += ok
        check(ok, 'a sessions file with %s stops ternd with a clear error' % what, log[-600:])
        check(not os.path.exists(t.control), 'and no control socket is left (%s)' % what)
    check('version this ternd does not read' in open(t.log, errors='replace').read(),
          'a newer version is named as such')
    print('sessions-file: %d of %d damaged files refused with a clear error (entries in the good one: %d)'
          % (clean, len(cases), n))
    # More suspended sessions than --sessions-max allows.
    with open(path, 'wb') as f:
        f.write(good)
    check(t.start(['--sessions-max', '1']), 'ternd starts with --sessions-max 1 (keep1 was resumed: '
          'nothing is suspended)', t.log_tail())
    t.stop()
    for bad in ('0', '-1', 'x', '65537', '99999999999999999999', ''):
        p = subprocess.run(t.cmd(['--sessions-max', bad]), capture_output=True, text=True, timeout=30)
        check(p.returncode == 2 and '--sessions-max' in p.stderr, '--sessions-max %r is refused' % bad,
              p.stderr)


def part_sessions_max(tmp):
    state = os.path.join(tmp, 'state-max')
    t = Ternd(tmp, state)
    check(t.start(['--sessions-max', '2']), 'ternd starts with --sessions-max 2', t.log_tail())
    apps = [App(t, 'm%d' % i) for i in range(3)]
    try:
        check(all(a.ready() for a in apps), 'three apps run')
        done = []
        for i in range(3):
            rc, obj, err = t.ckpt('suspend', 'm%d' % i)
            done.append(rc)
        check(done[:2] == [0, 0], 'two sessions suspend', str(done))
        rc, obj, err = t.ckpt('suspend', 'm2')
        check(rc == 1 and '--sessions-max' in err and 'cannot suspend' in err,
              'the third suspend is refused with a clear error', err)
        states = {k: v.get('state') for k, v in sessions_of(t).items()}
        check(states.get('m0') == 'suspended' and states.get('m1') == 'suspended'
              and states.get('m2') == 'active', 'm0 and m1 suspended, m2 still running', str(states))
        print('sessions-max 2: %d suspended, the third refused (%s)' % (done.count(0), err.strip()[:90]))
        rc, obj, err = t.ckpt('--timeout', '60', 'resume', 'm0')
        check(rc == 0, 'm0 resumes', err + t.log_tail())
        rc, obj, err = t.ckpt('suspend', 'm2')
        check(rc == 0, 'with room made, m2 suspends', err)
        t.stop()
        # Two sessions suspended (m1, m2): a ternd allowed one refuses to start.
        check(t.start(['--sessions-max', '1']) is False, 'ternd with --sessions-max 1 and two suspended '
              'sessions refuses to start')
        check('more than --sessions-max 1' in t.log_tail(), 'and says why', t.log_tail())
        check(t.start(['--sessions-max', '2']), 'ternd restarts with --sessions-max 2', t.log_tail())
        states = {k: v.get('state') for k, v in sessions_of(t).items()}
        check(states.get('m1') == 'suspended' and states.get('m2') == 'suspended',
              'm1 and m2 are still suspended after the restart', str(states))
    finally:
        for a in apps:
            a.end()
        t.stop()


def part_half_snapshot(tmp):
    t, app = session_up(tmp, 'state-half', 'h1', extra_mb=384)
    state = t.state
    try:
        rc, obj, err = t.ckpt('snapshot', 'h1', '--name', 'h-first')
        check(rc == 0, 'first snapshot', err)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(t.control)
        s.sendall(json.dumps({'op': 'snapshot', 'session': 'h1', 'snapshot': 'h-half'}).encode() + b'\n')
        tmpdir = os.path.join(state, 'store', 'snaps', '.tmp-h-half')
        for _ in range(500):
            if os.path.exists(tmpdir):
                break
            time.sleep(0.005)
        t.kill_all()
        s.close()
    finally:
        app.end()
    left = os.path.exists(tmpdir)
    # A reader holds the store (another ternd's worker would): no clean-up runs.
    import fcntl
    with open(os.path.join(state, 'store', 'lock'), 'a+') as lk:
        fcntl.flock(lk, fcntl.LOCK_SH)
        rc, obj, err = t.ckpt('ls')
        names = {x['name']: x for x in obj.get('snapshots', [])}
        check(rc == 0 and 'h-first' in names and names['h-first']['complete'], 'h-first is listed', str(obj))
        check('h-half' not in names, 'ls does not list the half-written snapshot', str(names.get('h-half')))
        rc, obj, err = t.ckpt('verify', 'h-half')
        check(rc == 1 and 'not found' in err, 'verify of it says not found', err)
        fcntl.flock(lk, fcntl.LOCK_UN)
    print('half-snapshot: killed with .tmp-h-half %s; listed: %s' % ('left' if left else 'gone',
                                                                    sorted(names)))
    check(t.start(), 'ternd restarts', t.log_tail())
    app = App(t, 'h1')
    try:
        check(app.ready(), 'the app runs again')
        rc, obj, err = t.ckpt('snapshot', 'h1', '--name', 'h-half')
        check(rc == 0, 'a new snapshot of the same name succeeds', err)
        rc, obj, err = t.ckpt('verify', 'h-half')
        check(rc == 0, 'and verifies', err)
    finally:
        app.end()
        t.stop()


def part_names(tmp):
    long_id = 'L' * 200
    t, app = session_up(tmp, 'state-names', long_id)
    try:
        check(long_id in sessions_of(t), 'ls shows the whole 200-byte id', str(list(sessions_of(t))))
        n250, n251 = 'n' * 250, 'n' * 251
        rc, obj, err = t.ckpt('snapshot', long_id, '--name', n250)
        check(rc == 0 and obj.get('session') == long_id, 'snapshot of the 200-byte session, 250-byte name',
              err + str(obj)[:300])
        rc, obj, err = t.ckpt('verify', n250)
        check(rc == 0, 'the 250-byte name verifies', err)
        rc, obj, err = t.ckpt('snapshot', long_id, '--name', n251)
        check(rc == 2 and 'name too long (max 250)' in err, 'ckpt: 251 bytes is "name too long (max 250)"', err)
        for verb in ('verify', 'inspect', 'restore', 'rm'):
            rc, obj, err = t.ckpt(verb, n251)
            check(rc == 2 and 'name too long (max 250)' in err and 'not found' not in err,
                  'ckpt %s of a 251-byte name says too long' % verb, err)
        a = t.raw({'op': 'snapshot', 'session': long_id, 'snapshot': n251})
        check(a.get('ok') is False and 'name too long (max 250)' in a.get('error', ''),
              'ternd: 251 bytes is "name too long (max 250)"', str(a)[:300])
        a = t.raw({'op': 'restore', 'snapshot': 'r' * 255})
        check(a.get('ok') is False and 'name too long (max 250)' in a.get('error', ''),
              'ternd: a restore of 255 bytes says too long', str(a)[:300])
        rc, obj, err = t.ckpt('suspend', long_id)
        check(rc == 0, 'suspend of the 200-byte session', err)
        rc, obj, err = t.ckpt('resume', long_id)
        check(rc == 0, 'resume of the 200-byte session', err + t.log_tail())
        print('names: session id of %d bytes and snapshot name of %d bytes end to end; 251 refused'
              % (len(long_id), len(n250)))

        # A snapshot named -x: made with --name, addressed after --.
        rc, obj, err = t.ckpt('snapshot', long_id, '--name', '-x')
        check(rc == 0, 'snapshot named -x', err)
        rc, obj, err = t.ckpt('verify', '-x')
        check(rc == 2 and 'ckpt verify -- -x' in err, 'verify -x says to write -- -x', err)
        rc, obj, err = t.ckpt('verify', '--', '-x')
        check(rc == 0 and obj.get('intact') is True, 'ckpt verify -- -x', err)
        rc, obj, err = t.ckpt('inspect', '--', '-x')
        check(rc == 0, 'ckpt inspect -- -x', err)
        rc, obj, err = t.ckpt('rm', '--', '-x', n250)
        check(rc == 0 and obj.get('ok') is True, 'ckpt rm -- -x NAME250', str(obj) + err)
        print('names: -x verified, inspected and removed after --')
    finally:
        app.end()
        t.stop()


def part_pack_missing(tmp):
    t, app = session_up(tmp, 'state-pack', 'p1')
    state = t.state
    try:
        rc, obj, err = t.ckpt('snapshot', 'p1', '--name', 'p-snap')
        check(rc == 0, 'snapshot p-snap', err)
    finally:
        app.end()
        t.stop()
    packs = sorted(f for f in os.listdir(os.path.join(state, 'store', 'packs')) if f.endswith('.pack'))
    check(packs, 'the store has packs')
    if not packs:
        return
    os.unlink(os.path.join(state, 'store', 'packs', packs[0]))
    rc, obj, err = t.ckpt('verify', 'p-snap')
    check(rc == 1 and 'pack missing: packs/' + packs[0] in err and 'not found' not in err,
          'verify of a snapshot whose pack was deleted says "pack missing"', err)
    print('pack-missing: %s' % err.strip()[-120:])


PARTS = {
    'rm-checks': part_rm_checks,
    'second-ternd': part_second_ternd,
    'sessions-file': part_sessions_file,
    'sessions-max': part_sessions_max,
    'half-snapshot': part_half_snapshot,
    'names': part_names,
    'pack-missing': part_pack_missing,
}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument('--ternd', required=True)
    ap.add_argument('--ckpt', required=True)
    ap.add_argument('--shim-dir', required=True)
    ap.add_argument('--prog', required=True)
    ap.add_argument('--plugin', required=True)
    ap.add_argument('parts', nargs='*', default=list(PARTS))
    ARGS = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix='tern-op-') as tmp:
        for name in ARGS.parts:
            t0 = time.time()
            PARTS[name](tmp)
            print('%s: %.1f s' % (name, time.time() - t0))
    return check.summary()


if __name__ == '__main__':
    sys.exit(main())
