#!/usr/bin/env python3
"""Session hijack (issue 12, item 1): a HELLO naming another guest's session
(live, being restored, suspended, suspended across a ternd restart) without
its credential, with a forged or another session's credential, or from
another uid with the right one, is refused, and the session is not
disturbed: its real guest still gets in.

usage: test_hijack.py TERND CKPT
"""
import os
import signal
import subprocess
import sys
import time

from hostile import (CUDA_SUCCESS, Ternd, alive, fail, hello, hello_finish)

ROUNDS = 100       # attempts of each kind per state


def ckpt(t, *args, wait=True):
    cmd = [CKPT, '--control', t.control, '--state-dir', t.state, '--timeout', '30'] + list(args)
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode:
        fail('ckpt %s: %s' % (' '.join(args), r.stderr.decode(errors='replace')))
    return r.stdout.decode()


def attempts(t, session, other_credential):
    accepted = tried = 0
    kinds = [
        lambda: hello(t.unix, session),
        lambda: hello(t.unix, session, proof=os.urandom(32)),
        lambda: hello(t.unix, session, proof=b'\0'),
        lambda: hello(t.unix, session, credential=other_credential),
        lambda: hello(t.tcp, session, token=t.token),
        lambda: hello(t.tcp, session, token=t.token, proof=os.urandom(32)),
    ]
    for attempt in kinds:
        for _ in range(ROUNDS):
            h = attempt()
            tried += 1
            if h.status == CUDA_SUCCESS:
                accepted += 1
                h.sock.close()
    return tried, accepted


def status_of(t, session):
    out = subprocess.run([TERND, 'status', '--control', t.control], stdout=subprocess.PIPE,
                         timeout=10).stdout.decode()
    for line in out.splitlines():
        if line.split() and line.split()[0] == session:
            return line.split()[-1]
    return 'absent'


def report(state, tried, accepted):
    print('hijack (%s): %d attempts, %d accepted' % (state, tried, accepted))
    if accepted:
        fail('a hello without the credential got a %s session' % state)


def main():
    t = Ternd(TERND)
    try:
        # The attacker's own session: a valid credential, of another session.
        mine = hello(t.unix, 'attacker')
        if mine.status != CUDA_SUCCESS or len(mine.credential) != 32:
            fail('a new session gets no credential: %s' % mine.status)
        victim = hello(t.unix, 'victim')
        if victim.status != CUDA_SUCCESS:
            fail('the victim cannot start: %s' % victim.status)
        cred = victim.credential
        seq = 1
        if not alive(victim.sock, seq):
            fail('victim session not answering')

        tried, accepted = attempts(t, 'victim', mine.credential)
        report('live', tried, accepted)
        seq += 1
        if not alive(victim.sock, seq):
            fail('the live victim was disturbed by the attempts')

        # Being restored: the live worker is stopped, and the next hello
        # with the credential gets the restored state.
        ckpt(t, 'snapshot', 'victim', '--name', 'v1')
        restore = ckpt(t, 'restore', 'v1', wait=False)
        for _ in range(100):
            if status_of(t, 'victim') == 'restoring':
                break
            time.sleep(0.05)
        else:
            fail('the session never showed as restoring')
        victim.sock.close()
        tried, accepted = attempts(t, 'victim', mine.credential)
        report('being restored', tried, accepted)
        if status_of(t, 'victim') != 'restoring':
            fail('the attempts disturbed the restore: %s' % status_of(t, 'victim'))
        back = hello(t.unix, 'victim', credential=cred, last_seq=seq)
        if back.status != CUDA_SUCCESS or back.resume_seq == 0:
            fail('the real guest did not get its restored session: %s' % back.status)
        if restore.wait(30):
            fail('ckpt restore failed: %s' % restore.stderr.read().decode())
        if back.credential != cred:
            fail('the restored session has another credential')
        seq = back.resume_seq + 1
        if not alive(back.sock, seq):
            fail('restored session not answering')
        print('hijack: the real guest came back to the restored session (resume_seq %d)' % back.resume_seq)

        # The id of a dead worker's session, claimed by another client; then
        # the operator restores the session's snapshot: the claimer is the
        # live session, but the state goes to the guest that made it.
        ckpt(t, 'snapshot', 'victim', '--name', 'v2')
        os.kill(back.worker_pid, signal.SIGKILL)
        back.sock.close()
        claim = None
        for _ in range(100):
            claim = hello(t.unix, 'victim')
            if claim.status == CUDA_SUCCESS:
                break
            time.sleep(0.05)
        if claim.status != CUDA_SUCCESS:
            fail('the dead session\'s id could not be claimed (it should: it holds nothing)')
        restore = ckpt(t, 'restore', 'v2', wait=False)
        for _ in range(100):
            if status_of(t, 'victim') == 'restoring':
                break
            time.sleep(0.05)
        claim.sock.close()
        tried = accepted = 0
        for _ in range(ROUNDS):
            h = hello(t.unix, 'victim', credential=claim.credential)
            tried += 1
            if h.status == CUDA_SUCCESS:
                accepted += 1
                h.sock.close()
        report('claimed after its worker died, then restored', tried, accepted)
        back = hello(t.unix, 'victim', credential=cred, last_seq=seq)
        if back.status != CUDA_SUCCESS or not back.resume_seq:
            fail('the real guest did not get the restored state: %s' % back.status)
        if restore.wait(30):
            fail('ckpt restore failed: %s' % restore.stderr.read().decode())
        seq = back.resume_seq + 1
        if not alive(back.sock, seq):
            fail('restored session not answering')
        print('hijack: after a claim of its id, the real guest got its restored session')

        # Suspended: its worker is gone; the id and snapshot wait for resume.
        ckpt(t, 'suspend', 'victim')
        back.sock.close()
        tried, accepted = attempts(t, 'victim', mine.credential)
        report('suspended', tried, accepted)
        if status_of(t, 'victim') != 'suspended':
            fail('the attempts disturbed the suspended session: %s' % status_of(t, 'victim'))

        # Across a restart: the credential comes from the snapshot's manifest.
        t.stop()
        state = t.state
        t2 = Ternd(TERND, state=state)
        try:
            tried, accepted = attempts(t2, 'victim', mine.credential)
            report('suspended, after a ternd restart', tried, accepted)
            pending, nonce = hello(t2.unix, 'victim', credential=cred, last_seq=seq, wait_reply=False)
            ckpt(t2, 'resume', 'victim')
            back = hello_finish(pending.sock, t2.unix, 'victim', None, nonce)
            if back.status != CUDA_SUCCESS or not back.resume_seq:
                fail('the real guest did not get its session back after the restart: %s' % back.status)
            if not alive(back.sock, back.resume_seq + 1):
                fail('resumed session not answering')
            print('hijack: the real guest resumed its session in a new ternd')
            uid_check(t2, 'victim', cred, back)
        finally:
            t2.stop()
    finally:
        t.stop()


def uid_check(t, session, cred, owner):
    """Another uid that holds the stolen credential: refused (root only)."""
    if os.geteuid() != 0:
        print('hijack (another uid): skipped, not root')
        return
    t.stop()
    t3 = Ternd(TERND, args=['--socket-group', 'nogroup'], state=t.state)
    try:
        owner = hello(t3.unix, 'uid-victim')
        refused = tried = 0
        for _ in range(ROUNDS):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    h = hello(t3.unix, 'uid-victim', credential=owner.credential)
                    os.write(w, b'%d' % h.status)
                except Exception as e:  # the report goes to the parent
                    os.write(w, b'E' + str(e).encode())
                os._exit(0)
            os.close(w)
            out = os.read(r, 200)
            os.close(r)
            os.waitpid(pid, 0)
            tried += 1
            if out == b'800':
                refused += 1
            elif out.startswith(b'E'):
                fail('the other uid could not even try: %s' % out.decode())
        print('hijack (another uid, right credential): %d attempts, %d accepted' % (tried, tried - refused))
        if refused != tried:
            fail('a uid that did not create the session reattached it')
        if not alive(owner.sock, 1):
            fail('the owner was disturbed')
    finally:
        t3.stop()


if __name__ == '__main__':
    TERND, CKPT = sys.argv[1], sys.argv[2]
    main()
