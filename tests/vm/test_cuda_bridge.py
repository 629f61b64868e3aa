#!/usr/bin/env python3
"""A CUDA program in a real guest, through tern's shim, reaches a ternd on
the host over the virtio-serial port, without the vmlink pieces: the guest
image's shim, its libraries and loader cache, ckpt_loop and the channel
carrying tern's own protocol both ways.

The guest bridges a loopback TCP port to the port with busybox nc (one
connection, raw bytes; so no save here: a reconnect loses host-to-guest
bytes, which is what vmlink is for); the shim connects there with
TERN_SERVER=tcp://127.0.0.1:PORT and the token. On the host, a python
bridge joins the channel's socket to ternd's TCP listener (sim backend,
the test kernels). ckpt_loop's checksum must equal a run on the host
against the same ternd.

usage: test_cuda_bridge.py BUILD_DIR
"""
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'security'))
import vmlib  # noqa: E402
from hostile import Ternd  # noqa: E402

ITERATIONS = 30
GUEST_PORT = 7000
TIMEOUT = 120

GUEST = r'''
port=/dev/virtio-ports/org.tern.0
[ -e "$port" ] || { echo "BRIDGE FAIL: no $port"; exit 1; }
printf '#!/bin/sh\ncat <&3 &\nexec cat >&3\n' >/run/bridge.sh
chmod +x /run/bridge.sh
exec 3<>"$port"
nc -l -p %(port)d -e /run/bridge.sh &
usleep 200000
# The host joins the channel to ternd once it reads this line.
echo BRIDGE >&3
TERN_SERVER=tcp://127.0.0.1:%(port)d TERN_TOKEN='%(token)s' ckpt_loop %(iterations)d
echo "BRIDGE ckpt_loop exit $?"
'''


def relay(src, dst):
    """Copy @src to @dst until either side ends; then close both."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ChannelBridge:
    """The host end of the channel: after the guest's "BRIDGE" line, its bytes
    go to ternd's TCP listener and back."""

    def __init__(self, path, ternd_port):
        self.path = path
        self.ternd_port = ternd_port
        self.listener = vmlib.channel_listener(path)
        self.bridged = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self._bridge, args=(conn,), daemon=True).start()

    def _bridge(self, conn):
        buf = b''
        while b'BRIDGE\n' not in buf:
            data = conn.recv(4096)
            if not data or len(buf) > 4096:
                conn.close()
                return
            buf += data
        rest = buf.split(b'BRIDGE\n', 1)[1]
        ternd = socket.create_connection(('127.0.0.1', self.ternd_port))
        if rest:
            ternd.sendall(rest)
        self.bridged.set()
        threading.Thread(target=relay, args=(ternd, conn), daemon=True).start()
        relay(conn, ternd)


def main():
    build = sys.argv[1]
    lab = vmlib.Lab(build)
    token = 'a-token-of-the-vm-suite-%d' % os.getpid()
    ternd = Ternd(os.path.join(build, 'replayer', 'ternd'), token=token.encode(),
                  args=['--sim-kernels', os.path.join(build, 'tests', 'cuda', 'libtern_test_kernels.so')])
    try:
        with lab:
            bridge = ChannelBridge(lab.path('channel.sock'), ternd.port)
            dom = lab.domain(GUEST % {'port': GUEST_PORT, 'token': token, 'iterations': ITERATIONS},
                             channels=[bridge.path], after='idle')
            dom.start()
            m = dom.wait_console(r'BRIDGE (FAIL[^\n]*|ckpt_loop exit (\d+))', TIMEOUT)
            guest_out = dom.console()
            if not bridge.bridged.is_set():
                raise vmlib.VmError('the guest never reached the host bridge')
            if m.group(2) != '0':
                raise vmlib.VmError('in the guest: %s; console tail:\n%s' % (m.group(0), dom.console_tail()))
            if 'PASS ckpt_loop' not in guest_out:
                raise vmlib.VmError('ckpt_loop in the guest printed no PASS line')
            in_guest = vmlib.checksum(guest_out, 'ckpt_loop in the guest')
            dom.wait_exit(TIMEOUT)
            # tern.after=idle: the guest stays up for the host to stop it.
            time.sleep(1)
            if dom.state() != 'running':
                raise vmlib.VmError('the idle guest is %r, not running' % dom.state())
            dom.destroy()
            if dom.state() != 'shut off':
                raise vmlib.VmError('after destroy the guest is %r' % dom.state())

            env = dict(os.environ, TERN_SERVER=ternd.unix,
                       LD_LIBRARY_PATH=os.path.join(build, 'guest-shim'))
            r = subprocess.run([os.path.join(build, 'tests', 'cuda', 'ckpt_loop'), str(ITERATIONS)],
                               env=env, stdout=subprocess.PIPE, text=True, timeout=TIMEOUT)
            on_host = vmlib.checksum(r.stdout, 'ckpt_loop on the host')
            print('ckpt_loop %d iterations: guest checksum %s, host checksum %s'
                  % (ITERATIONS, in_guest, on_host))
            if in_guest != on_host:
                raise vmlib.VmError('the guest computed another checksum than the host')
    finally:
        ternd.stop()
    print('PASS vm_cuda_bridge')


if __name__ == '__main__':
    vmlib.test_main(main)
