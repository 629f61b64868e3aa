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
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'security'))
import hostile  # noqa: E402


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
