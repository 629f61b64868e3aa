#!/usr/bin/env python3
"""Socket permissions (issue 12, item 4): under umask 000 the guest socket is
0660 and the control socket 0600; with --socket-group both are of that
group and the control socket 0660. The control socket checks its peer
(SO_PEERCRED): a uid that is not root, ternd's or the group's is refused
even where the file's mode would let it in (root only: a child setuid()s
to nobody).

usage: test_sockets.py TERND
"""
import os
import stat
import subprocess
import sys

from hostile import Ternd, fail


def mode_of(path):
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_gid


def as_nobody(argv):
    """Run @argv as uid/gid 65534; (exit status, output)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(w)
    out = b''
    while True:
        piece = os.read(r, 4096)
        if not piece:
            break
        out += piece
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors='replace')


def main():
    t = Ternd(TERND, umask=0)
    try:
        guest, _ = mode_of(t.sock)
        control, _ = mode_of(t.control)
        print('sockets under umask 000: guest %04o, control %04o' % (guest, control))
        if guest != 0o660 or control != 0o600:
            fail('socket modes follow the umask')
        if os.geteuid() != 0:
            print('control peer check: skipped, not root')
            return
        rc, out = as_nobody([TERND, 'status', '--control', t.control])
        print('control socket 0600, uid 65534: exit %d (%s)' % (rc, out.strip().splitlines()[0]))
        if rc == 0:
            fail('another uid used the control socket')
        # A careless chmod: the file lets everyone in, the peer check does not.
        os.chmod(t.control, 0o666)
        rc, out = as_nobody([TERND, 'status', '--control', t.control])
        print('control socket chmod 0666, uid 65534: exit %d (%s)' % (rc, out.strip().splitlines()[0]))
        if rc == 0 or 'may not use' not in out:
            fail('the control socket served a uid it should refuse: %s' % out)
        r = subprocess.run([TERND, 'status', '--control', t.control], stdout=subprocess.PIPE, timeout=10)
        if r.returncode:
            fail('root was refused by its own ternd')
    finally:
        t.stop()
    t = Ternd(TERND, umask=0, args=['--socket-group', 'nogroup'])
    try:
        guest, ggid = mode_of(t.sock)
        control, cgid = mode_of(t.control)
        print('with --socket-group nogroup: guest %04o gid %d, control %04o gid %d' % (guest, ggid, control, cgid))
        if guest != 0o660 or control != 0o660 or ggid != 65534 or cgid != 65534:
            fail('--socket-group not applied')
        if os.geteuid() == 0:
            rc, out = as_nobody([TERND, 'status', '--control', t.control])
            print('control socket, a member of the group: exit %d' % rc)
            if rc:
                fail('a member of --socket-group was refused: %s' % out)
    finally:
        t.stop()


if __name__ == '__main__':
    TERND = sys.argv[1]
    main()
