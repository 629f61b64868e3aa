#!/usr/bin/env python3
"""A guest talks over its virtio-serial port through a save and restore, a
managed save and start, and a suspend and resume (no tern piece involved:
the channel alone, as VM.md describes it). One reply is sent while the
guest is paused for the save: the guest can only have it from the new
connection.

The guest (busybox sh) writes "ping N" to /dev/virtio-ports/org.tern.0 and
waits for "pong N"; a python server on the host end of the channel (the
unix socket QEMU connects to) answers. The channel loses host-to-guest
bytes across a reconnect, so the server answers the last ping again on
every new connection, and the guest asks again after a line it cannot
read; guest-to-host bytes must arrive in order, none missing. Each
operation is made in the middle of the exchange, and the exchange must go
on after it. Prints the boot time and the time of each operation.

usage: test_echo.py BUILD_DIR
"""
import os
import re
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmlib  # noqa: E402

# Pings between two operations: enough that each one lands mid-exchange.
PINGS_BETWEEN = 25
TIMEOUT = 60

GUEST = r'''
port=/dev/virtio-ports/org.tern.0
[ -e "$port" ] || { echo "ECHO FAIL: no $port"; exit 1; }
exec 3<>"$port"
i=1 garbled=0 repeated=0
while :; do
	echo "ping $i" >&3
	while :; do
		if ! read -r word got stop <&3 || [ "$word" != pong ] || [ -z "$got" ]; then
			# A reply cut by a reconnect: ask again (the host answers a repeated ping).
			garbled=$((garbled + 1))
			usleep 50000
			echo "ping $i" >&3
			continue
		fi
		[ "$got" = "$i" ] && break
		if [ "$got" -lt "$i" ] 2>/dev/null; then
			repeated=$((repeated + 1))
			continue
		fi
		echo "ECHO FAIL: pong $got to ping $i"
		exit 1
	done
	[ "$stop" = stop ] && break
	i=$((i + 1))
	usleep 10000
done
echo "ECHO PASS $i replies, $repeated repeated, $garbled asked again"
'''


class EchoServer:
    """The host end of the channel: one connection at a time (a new one
    replaces the old), pings checked in order, the last one answered again
    on each new connection."""

    def __init__(self, path):
        self.path = path
        self.listener = vmlib.channel_listener(path)
        self.lock = threading.Condition()
        self.last = 0            # highest ping received
        self.asked_again = 0     # pings repeated by the guest
        self.connections = 0
        self.stop_after = None   # answer "stop" to this ping
        self.hold_at = None      # keep the reply to this ping until release()
        self.held = None         # (connection, reply) kept
        self.error = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _fail(self, msg):
        with self.lock:
            self.error = msg
            self.lock.notify_all()

    def _serve(self):
        while True:
            conn, _ = self.listener.accept()
            with self.lock:
                self.connections += 1
                number = self.connections
                last = self.last
            if last:
                # Whatever was in flight to the guest is lost with the old connection.
                conn.sendall(b'pong %d\n' % last)
            threading.Thread(target=self._talk, args=(conn, number), daemon=True).start()

    def _talk(self, conn, number):
        buf = b''
        while True:
            try:
                data = conn.recv(4096)
            except OSError:
                data = b''
            if not data:
                conn.close()
                return
            buf += data
            while b'\n' in buf:
                line, buf = buf.split(b'\n', 1)
                m = re.fullmatch(rb'ping (\d+)', line)
                if not m:
                    return self._fail('connection %d: not a ping: %r' % (number, line))
                n = int(m.group(1))
                with self.lock:
                    if n == self.last:
                        self.asked_again += 1
                    elif n != self.last + 1:
                        return self._fail('ping %d after ping %d: guest-to-host bytes lost or '
                                          'reordered' % (n, self.last))
                    self.last = n
                    stop = self.stop_after is not None and n >= self.stop_after
                    self.lock.notify_all()
                    reply = b'pong %d%s\n' % (n, b' stop' if stop else b'')
                    if n == self.hold_at:
                        self.held, self.hold_at = (conn, reply), None
                        continue
                self._send(conn, reply)

    @staticmethod
    def _send(conn, reply):
        try:
            conn.sendall(reply)
        except OSError:
            pass  # the reply is sent again on the next connection

    def release(self):
        """Send the reply held by hold_at."""
        with self.lock:
            held, self.held = self.held, None
        if held:
            self._send(*held)

    def wait_pings(self, count, what):
        """Wait until @count pings have arrived; fails on a protocol error."""
        deadline = time.monotonic() + TIMEOUT
        with self.lock:
            while self.last < count and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise vmlib.VmError('%s: %d pings of %d in %d s' % (what, self.last, count, TIMEOUT))
                self.lock.wait(left)
            if self.error:
                raise vmlib.VmError(self.error)
            return self.last


def main():
    build = sys.argv[1]
    lab = vmlib.Lab(build)
    with lab:
        server = EchoServer(lab.path('channel.sock'))
        # A uuid picked first, as vm-attach needs it before the domain exists.
        picked = str(uuid.uuid4())
        dom = lab.domain(GUEST, channels=[server.path], uuid=picked)
        if vmlib.virsh('domuuid', dom.name).stdout.strip() != picked:
            raise vmlib.VmError('the domain does not have the uuid given')
        boot_s = dom.start()
        server.wait_pings(PINGS_BETWEEN, 'after boot')
        figures = ['boot %.1f s' % boot_s]

        def resumed(what, t_done):
            """The exchange goes on after @what: PINGS_BETWEEN more pings."""
            base = server.last
            server.wait_pings(base + 1, 'after ' + what)
            gap = time.monotonic() - t_done
            server.wait_pings(base + PINGS_BETWEEN, 'after ' + what)
            print('%s: the next ping came %.2f s after the operation returned' % (what, gap))

        # A reply sent while the guest is paused for the save, which VM.md
        # says is lost: the guest gets it only from the new connection.
        image = lab.path('echo.save')
        conns = server.connections
        with server.lock:
            server.hold_at = server.last + 5
        server.wait_pings(server.hold_at, 'before the save')
        dom.suspend()
        server.release()
        time.sleep(0.2)
        save_s = dom.save(image)
        saved_at = server.last
        restore_s = dom.restore(image, running=True)
        resumed('save + restore', time.monotonic())
        figures.append('save %.1f s (at ping %d, its reply sent while paused), restore %.1f s'
                       % (save_s, saved_at, restore_s))
        if server.connections <= conns:
            raise vmlib.VmError('no new channel connection after the restore')

        conns = server.connections
        managed_s = dom.managedsave()
        if dom.state() != 'shut off':
            raise vmlib.VmError('after managedsave the domain is %r' % dom.state())
        start_s = dom.start_saved()
        resumed('managedsave + start', time.monotonic())
        figures.append('managedsave %.1f s, start %.1f s' % (managed_s, start_s))
        if server.connections <= conns:
            raise vmlib.VmError('no new channel connection after the start from a managed save')

        dom.suspend()
        paused_at = server.last
        time.sleep(1)
        if server.last > paused_at + 1:
            raise vmlib.VmError('pings went on while the domain was suspended (%d -> %d)'
                                % (paused_at, server.last))
        dom.resume()
        resumed('suspend + resume', time.monotonic())

        with server.lock:
            server.stop_after = server.last + 1
        m = dom.wait_console(r'ECHO (PASS|FAIL)[^\n]*', TIMEOUT)
        print('guest: %s' % m.group(0))
        if m.group(1) != 'PASS':
            raise vmlib.VmError('the guest failed: %s' % m.group(0))
        status = dom.wait_exit(TIMEOUT)
        if status != 0:
            raise vmlib.VmError('the guest script exited %d' % status)
        dom.wait_state('shut off', TIMEOUT)
        if server.error:
            raise vmlib.VmError(server.error)
        print('figures: %s; %d pings, %d asked again, %d channel connections'
              % ('; '.join(figures), server.last, server.asked_again, server.connections))
    print('PASS vm_echo')


if __name__ == '__main__':
    vmlib.test_main(main)
