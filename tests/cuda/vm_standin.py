"""The VM channel without a VM (docs/vm-transport.md, "The stand-in").

ternd is asked to attach a domain (vm-attach on its control socket, as
the libvirt hook does), and tern-agent connects to the domain's socket the
way QEMU's virtio-serial port would (--port-connect): programs that reach
the agent's socket go through vmlink, the domain's relay in ternd and its
pre-authentication, under session ids DOMAIN-UUID/ID. This is what runs on
the GPU machine, which has no QEMU, and in the tests that need no guest.

    path = attach(control_path, uuid, name)
    agent = Agent(agent_exe, path, listen_path, log_path)
    ... TERN_SERVER=unix:<listen_path> ...
    agent.stop()

With ivshmem, a /dev/shm file stands in for the domain's ivshmem BAR
(docs/vm-transport.md, "ivshmem"): ternd gets IVSHMEM_TERND_ARGS(bar), the
programs TERN_IVSHMEM=bar.path, and their sessions' rings and pinned
buffers live in slots of it.

    bar = Bar(uuid)          # before ternd starts
    ... bar.remove()
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'security'))
import hostile  # noqa: E402


# The stand-in BAR: four slots, each with rings of 8 MiB (shm's default) and
# room for bench/overhead's 4 GiB pinned buffer. A sparse file: only the
# pages the sessions touch take memory.
IVSHMEM_SLOT = (4 << 30) + (32 << 20)
IVSHMEM_BAR = 4096 + 4 * IVSHMEM_SLOT


class Bar:
    """libvirt's /dev/shm/tern-UUID of <shmem name='tern-UUID'>, in a
    folder of its own under /dev/shm (ternd's --ivshmem-dir)."""

    def __init__(self, uuid, size=IVSHMEM_BAR, slot=IVSHMEM_SLOT):
        self.dir = tempfile.mkdtemp(prefix='tern-test-bar-', dir='/dev/shm')
        self.path = os.path.join(self.dir, 'tern-' + uuid)
        self.slot = slot
        with open(self.path, 'wb') as f:
            f.truncate(size)

    def ternd_args(self):
        return ['--ivshmem-dir', self.dir, '--ivshmem-slot', str(self.slot)]

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def on_bar(shim_log):
    """How many times the shim logged its session's move onto the BAR
    (logged at info, once a connection)."""
    try:
        with open(shim_log, errors='replace') as f:
            return f.read().count('on ivshmem slot')
    except OSError:
        return 0


class StandinError(Exception):
    """A step of the stand-in that failed; the message says which."""


def control(path, req, timeout=30):
    """One request on ternd's control socket (a dict); its final reply."""
    r = hostile.control_request(path, req, timeout)
    if not r:
        raise StandinError('no answer to %r' % (req,))
    return r


def attach(control_path, uuid, name, timeout=30):
    """vm-attach: the socket ternd listens on for the domain's port."""
    r = control(control_path, {'op': 'vm-attach', 'uuid': uuid, 'name': name}, timeout)
    if not r.get('ok') or not r.get('path'):
        raise StandinError('vm-attach %s: %s' % (uuid, r))
    return r['path']


class Agent:
    """tern-agent whose port is a domain's socket: programs connect to
    @listen. @extra: more tern-agent arguments."""

    def __init__(self, exe, domain_socket, listen, log, extra=(), timeout=5):
        self.listen = listen
        with open(log, 'ab') as out:
            self.proc = subprocess.Popen(
                [exe, '--port-connect', 'unix:' + domain_socket, '--listen', listen] + list(extra),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out)
        deadline = time.monotonic() + timeout
        while not os.path.exists(listen):
            if self.proc.poll() is not None:
                raise StandinError('tern-agent exited with %d before it listened on %s (see %s)'
                                   % (self.proc.returncode, listen, log))
            if time.monotonic() > deadline:
                self.stop()
                raise StandinError('tern-agent did not listen on %s within %d s' % (listen, timeout))
            time.sleep(0.01)

    def stop(self, timeout=10):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
