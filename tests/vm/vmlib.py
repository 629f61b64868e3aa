"""The vm suite's library: real guests under libvirt, driven with virsh.

The guest is tools/vm-image's kernel and initramfs (busybox, the virtio
modules, tern's shim and agent, the CUDA test programs), booted directly
by a TCG domain (<domain type='qemu'>: KVM here is nested and slower, see
../shared/VM.md). Its init runs the script a test gives (base64 on the
kernel command line, tern.run=), writes everything to the serial console,
which libvirt logs to a file the test reads, and powers off or idles.

    lab = vmlib.Lab(build_dir)            # skips (77) when this host cannot
    with lab:                             # every domain it made is removed
        dom = lab.domain(script, channels=[sock_path], after='idle')
        boot_s = dom.start()              # seconds until "tern-init: ready"
        dom.wait_console(r'PASS', 60)
        dom.save(lab.path('a.save')); dom.restore(lab.path('a.save'))
        with vmlib.SecondLibvirtd(lab.path('lv2')) as dest:   # migrations
            dom.migrate(dest); dom.on(dest).migrate(vmlib.SYSTEM)

What a test needs of the host, and what this library does about it:
- root, qemu-system-x86_64, libvirtd, virtlogd, virsh: without one of
  them the test exits 77 (meson's "skipped") and prints why;
- virtlogd and libvirtd running: started here (`-d`) when their sockets do
  not answer, left running afterwards (another test, or the libvirt
  hooks' tests, uses the same daemons; nothing here needs systemd);
- /dev/kvm of group kvm, mode 0660, or libvirt probes QEMU again at every
  call (40 s per define): set while a Lab is open (KvmLease: other
  processes using this library share it), restored by the last one;
- domains named tern-vmtest-PID-N: a Lab removes its own at exit (also
  after an exception or SIGTERM, meson's timeout) and those of dead PIDs;
- a SecondLibvirtd (a migration's other end, in a mount namespace of its
  own) is stopped with its domains likewise, and one of a dead PID by the
  next one made.

Debugging: each Lab prints its folder (console logs DIR/NAME.console, the
domain XML beside it); TERN_VM_KEEP=1 keeps the folder and the domains;
`virsh list --all`, `virsh dumpxml NAME`, /var/log/libvirt/qemu/NAME.log.

The tests of this suite run one at a time (is_parallel: false): they
share the daemons and two cores.
"""
import atexit
import base64
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from xml.sax.saxutils import escape, quoteattr

SKIP = 77
CONNECT = 'qemu:///system'
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME_PREFIX = 'tern-vmtest-'
# The kernel's command line is at most 2048 bytes on x86; the script rides on it.
CMDLINE_MAX = 2000
READY = r'tern-init: ready uptime ([0-9.]+)'
EXIT = r'tern-init: exit status (\d+)'
# Domain names are unique in this process, across Labs.
_domain_numbers = itertools.count()


class VmError(Exception):
    """A libvirt or guest step that failed; the message says which and why."""


def skip(reason):
    print('SKIP: %s' % reason)
    sys.stdout.flush()
    sys.exit(SKIP)


def host_unfit():
    """Why this host cannot run a guest under libvirt, or None."""
    if os.geteuid() != 0:
        return 'the vm suite needs root (libvirt system daemons, /dev/kvm mode)'
    for prog in ('qemu-system-x86_64', 'virsh', 'libvirtd', 'virtlogd'):
        if shutil.which(prog) is None:
            return ('no %s: install libvirt-daemon-system libvirt-daemon-driver-qemu '
                    'libvirt-clients qemu-system-x86 (tools/setup)' % prog)
    return None


def run(argv, timeout, check=True):
    """Run @argv with a timeout; its CompletedProcess (text). check: raise
    VmError naming the command and its stderr when it fails or hangs."""
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise VmError('%s: no answer in %d s' % (' '.join(argv), timeout))
    if check and r.returncode != 0:
        raise VmError('%s: exit %d: %s' % (' '.join(argv), r.returncode,
                                           (r.stderr or r.stdout).strip()))
    return r


class Daemon:
    """A libvirtd that domains run on and migrate to: its URI, and the TCP
    ports its QEMUs may listen on for an incoming migration (qemu.conf's
    migration_port_min and _max)."""

    def __init__(self, uri, migration_ports):
        self.uri = uri
        self.migration_ports = migration_ports

    def virsh(self, *args, timeout=60, check=True):
        return run(['virsh', '-q', '-c', self.uri] + list(args), timeout, check)

    def domains(self):
        """The names of every domain it knows, running or not."""
        return self.virsh('list', '--all', '--name', timeout=30).stdout.split()


# The system libvirtd, with qemu.conf's default migration ports.
SYSTEM = Daemon(CONNECT, (49152, 49215))


def virsh(*args, timeout=60, check=True):
    return SYSTEM.virsh(*args, timeout=timeout, check=check)


def free_port(first, last):
    """The first TCP port of @first..@last that nothing holds on 127.0.0.1.
    Bound with SO_REUSEADDR as libvirtd and QEMU bind theirs, so that a port
    left in TIME_WAIT by the last run's connections counts as free."""
    for port in range(first, last + 1):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(('127.0.0.1', port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise VmError('no free TCP port on 127.0.0.1 in %d-%d' % (first, last))


def socket_answers(path):
    """Whether a daemon accepts connections on the unix socket @path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def file_tail(path, lines):
    """The last @lines lines of the log file @path ('' when there is none)."""
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:])
    except FileNotFoundError:
        return ''


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise VmError('%s: not after %d s' % (what, timeout))
        time.sleep(0.1)


def ensure_daemons(timeout=90):
    """Start virtlogd and libvirtd unless they already answer; wait until
    libvirtd serves qemu:///system. The first start probes QEMU (about 8 s)."""
    for daemon, sock in (('virtlogd', '/run/libvirt/virtlogd-sock'),
                         ('libvirtd', '/run/libvirt/libvirt-sock')):
        if socket_answers(sock):
            continue
        print('vmlib: starting %s' % daemon)
        # Another test may start it at the same moment: then this one exits
        # (its pid file is taken) and the other's socket answers.
        r = run([daemon, '-d'], 30, check=False)
        try:
            wait_for(lambda: socket_answers(sock), 30, daemon + "'s socket " + sock)
        except VmError as e:
            raise VmError('%s (%s -d: exit %d: %s)' % (e, daemon, r.returncode, r.stderr.strip()))
    wait_for(lambda: virsh('version', timeout=timeout, check=False).returncode == 0,
             timeout, 'libvirtd answering virsh version')


def image(build_dir, extra_args=()):
    """Build (or find up to date) the guest of tools/vm-image; (kernel, initrd)."""
    r = run([os.path.join(TOP, 'tools', 'vm-image')] + list(extra_args) + [build_dir], 600)
    print(r.stdout.strip())
    vm = os.path.join(build_dir, 'vm')
    return os.path.join(vm, 'vmlinuz'), os.path.join(vm, 'initramfs.gz')


def guest_cmdline(script, after, ports):
    """The kernel command line that makes the image's init run @script."""
    if after not in ('poweroff', 'idle'):
        raise ValueError('after must be poweroff or idle, not %r' % after)
    b64 = base64.b64encode(script.encode()).decode()
    line = 'console=ttyS0 panic=-1 tern.after=%s tern.ports=%d tern.run=%s' % (after, ports, b64)
    if len(line) > CMDLINE_MAX:
        raise VmError('the guest script is %d bytes, too long for the kernel command line '
                      '(%d in all): put it in the image (tools/vm-image --add FILE:/etc/tern/run.sh)'
                      % (len(script), CMDLINE_MAX))
    return line


def domain_xml(name, uuid, kernel, initrd, cmdline, console_log, channels, memory_mib,
               devices_xml=''):
    """A TCG domain booting @kernel directly, its serial console appended to
    @console_log, one virtio-serial port per (socket path, port name) of
    @channels, QEMU connecting to a socket the host side listens on;
    @devices_xml (trusted, the test's own) is added to <devices>."""
    chans = ''.join(
        "    <channel type='unix'>\n"
        "      <source mode='connect' path=%s><reconnect enabled='yes' timeout='1'/></source>\n"
        "      <target type='virtio' name=%s/>\n"
        "    </channel>\n" % (quoteattr(path), quoteattr(port)) for path, port in channels)
    return """<domain type='qemu'>
  <name>%(name)s</name>
  <uuid>%(uuid)s</uuid>
  <title>tern vm suite, pid %(pid)d</title>
  <memory unit='MiB'>%(mem)d</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%(kernel)s</kernel>
    <initrd>%(initrd)s</initrd>
    <cmdline>%(cmdline)s</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <serial type='file'>
      <source path=%(log)s append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path=%(log)s append='on'/>
      <target type='serial' port='0'/>
    </console>
%(chans)s%(devices)s    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>
""" % {'name': escape(name), 'uuid': uuid, 'pid': os.getpid(), 'mem': memory_mib,
       'kernel': escape(kernel), 'initrd': escape(initrd), 'cmdline': escape(cmdline),
       'log': quoteattr(console_log), 'chans': chans, 'devices': devices_xml}


class Domain:
    """One defined domain of a Lab, as one Daemon (@daemon, default the
    system libvirtd) sees it. Each action waits for its end (virsh has a
    timeout) and returns the seconds it took."""

    def __init__(self, name, uuid, console_log, daemon=SYSTEM):
        self.name = name
        self.uuid = uuid
        self.console_log = console_log
        self.daemon = daemon

    def _timed(self, timeout, *args):
        t0 = time.monotonic()
        self.daemon.virsh(*args, timeout=timeout)
        return time.monotonic() - t0

    def on(self, daemon):
        """The same domain as @daemon sees it (where a migration took it):
        state, console, destroy ... go to @daemon. The console log is the
        same file: the XML travels with the migration, and the destination's
        QEMU appends to the path it names."""
        return Domain(self.name, self.uuid, self.console_log, daemon)

    def state(self):
        """'running', 'paused', 'shut off' ... as virsh domstate says it."""
        return self.daemon.virsh('domstate', self.name, timeout=30).stdout.strip()

    def console(self, since=0):
        """The console log from byte @since on."""
        try:
            with open(self.console_log, 'rb') as f:
                f.seek(since)
                return f.read().decode(errors='replace')
        except FileNotFoundError:
            return ''

    def console_size(self):
        try:
            return os.path.getsize(self.console_log)
        except FileNotFoundError:
            return 0

    def console_tail(self, lines=30):
        return '\n'.join(self.console().splitlines()[-lines:])

    def wait_console(self, pattern, timeout, since=0):
        """Wait for the regex @pattern in the console log after byte @since;
        its match. Fails early, with the log's tail, when the domain stops."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        next_state_check = 0
        while True:
            m = regex.search(self.console(since))
            if m:
                return m
            now = time.monotonic()
            if now > deadline:
                raise VmError('%s: no console line matching %r in %d s; console tail:\n%s'
                              % (self.name, pattern, timeout, self.console_tail()))
            if now > next_state_check:
                next_state_check = now + 1
                if self.state() == 'shut off':
                    m = regex.search(self.console(since))
                    if m:
                        return m
                    raise VmError('%s stopped before a console line matched %r; console tail:\n%s'
                                  % (self.name, pattern, self.console_tail()))
            time.sleep(0.05)

    def start(self, timeout=120):
        """Boot (or start from a managed save, see start_saved); the seconds
        from `virsh start` to the guest's "tern-init: ready"."""
        since = self.console_size()
        t0 = time.monotonic()
        self.daemon.virsh('start', self.name, timeout=timeout)
        m = self.wait_console(READY, timeout, since)
        boot_s = time.monotonic() - t0
        print('%s: booted in %.1f s (guest uptime %s s at ready)' % (self.name, boot_s, m.group(1)))
        return boot_s

    def start_saved(self, timeout=120):
        """`virsh start` of a domain with a managed save image (no boot)."""
        return self._timed(timeout, 'start', self.name)

    def save(self, path, timeout=120):
        return self._timed(timeout, 'save', self.name, path)

    def restore(self, path, timeout=120, running=False):
        """running: resume a domain that was saved while paused."""
        return self._timed(timeout, 'restore', path, *(['--running'] if running else []))

    def managedsave(self, timeout=120):
        return self._timed(timeout, 'managedsave', self.name)

    def suspend(self, timeout=30):
        return self._timed(timeout, 'suspend', self.name)

    def resume(self, timeout=30):
        return self._timed(timeout, 'resume', self.name)

    def destroy(self, timeout=30):
        return self._timed(timeout, 'destroy', self.name)

    def migrate(self, dest, live=True, extra=(), timeout=120):
        """`virsh migrate [--live] EXTRA NAME DEST_URI --migrateuri
        tcp://127.0.0.1:PORT` to the Daemon @dest, PORT a free one of its
        migration ports; @extra: more options (['--suspend'], ['--bandwidth',
        '1'] in MiB/s ...). The seconds it took; afterwards the domain is
        self.on(dest). VmError with virsh's message when it fails (also when
        domjobabort cancelled it)."""
        port = free_port(*dest.migration_ports)
        return self._timed(timeout, 'migrate', *(['--live'] if live else []), *extra, self.name,
                           dest.uri, '--migrateuri', 'tcp://127.0.0.1:%d' % port)

    def domjobabort(self, timeout=30):
        """Cancel the domain's job (a migration, run from the source's side)."""
        return self._timed(timeout, 'domjobabort', self.name)

    def jobinfo(self):
        """`virsh domjobinfo` as a dict: {'Job type': 'Unbounded' (one runs) or
        'None', 'Data processed': '12.005 MiB', ...}."""
        out = self.daemon.virsh('domjobinfo', self.name, timeout=30).stdout
        return dict((k.strip(), v.strip()) for k, _, v in
                    (line.partition(':') for line in out.splitlines() if ':' in line))

    def wait_state(self, state, timeout):
        wait_for(lambda: self.state() == state, timeout, '%s in state %r' % (self.name, state))

    def wait_exit(self, timeout):
        """Wait for the guest's script to end; its exit status."""
        return int(self.wait_console(EXIT, timeout).group(1))


def checksum(text, where):
    """The checksum ckpt_loop printed in @text ("CHECKSUM HEX"); VmError
    naming @where when there is none."""
    m = re.search(r'CHECKSUM ([0-9a-f]+)', text)
    if not m:
        raise VmError('%s printed no CHECKSUM:\n%s' % (where, text[-2000:]))
    return m.group(1)


def channel_listener(path, backlog=4):
    """A unix socket listening at @path for QEMU's end of a channel (QEMU
    runs as libvirt-qemu, so anyone may connect: keep it in a Lab folder)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o666)
    listener.listen(backlog)
    return listener


def test_main(main):
    """Run a test's @main: a VmError is the test's failure, printed as one
    FAIL line with its reason (exit 1); a skip exits 77 (see skip)."""
    try:
        main()
    except VmError as e:
        print('FAIL: %s' % e)
        sys.exit(1)


class Checks:
    """A list of named checks for tests that make many: each prints "ok" or
    "FAIL" with what it checks; finish() ends the test (exit 1 on any
    failure, else the PASS line)."""

    def __init__(self):
        self.failed = []

    def __call__(self, ok, what):
        print('%s: %s' % ('ok' if ok else 'FAIL', what))
        if not ok:
            self.failed.append(what)
        return ok

    def finish(self, name):
        if self.failed:
            print('FAIL: %d checks: %s' % (len(self.failed), '; '.join(self.failed)))
            sys.exit(1)
        print('PASS %s' % name)


def remove_domain(name, daemon=SYSTEM):
    """Destroy and undefine @name on @daemon with its managed save image;
    quiet when it is already gone (or transient: gone once destroyed)."""
    daemon.virsh('destroy', name, timeout=30, check=False)
    daemon.virsh('undefine', '--managed-save', name, timeout=30, check=False)


def process_stop(proc, timeout=20):
    """SIGTERM to @proc (a Popen), SIGKILL to its process group if it has not
    ended after @timeout seconds (started with start_new_session: its
    children too)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class KvmLease:
    """/dev/kvm of group kvm, mode 0660 while any lease is held (VM.md: else
    libvirt probes QEMU again at every call, 40 s per define); the last
    lease to go puts the old group and mode back. Leases of several
    processes share @state: each holds a shared flock on kvm.users for its
    lifetime; kvm.lock serialises taking and giving back; the original mode
    waits in kvm.orig until the last lease restores it (so a holder killed
    with SIGKILL only delays the restore to the next lease's end)."""

    def __init__(self, device='/dev/kvm', state='/run/tern-vmtest'):
        import fcntl
        self._fcntl = fcntl
        self.device = device
        os.makedirs(state, exist_ok=True)
        self.orig = os.path.join(state, 'kvm.orig')
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        self.mutex = os.open(os.path.join(state, 'kvm.lock'), flags, 0o600)
        self.users = os.open(os.path.join(state, 'kvm.users'), flags, 0o600)
        fcntl.flock(self.mutex, fcntl.LOCK_EX)
        try:
            self._take()
            fcntl.flock(self.users, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.mutex, fcntl.LOCK_UN)

    def _take(self):
        try:
            st = os.stat(self.device)
        except FileNotFoundError:
            return
        gid = _group_id('kvm')
        if gid is None or (st.st_gid == gid and stat.S_IMODE(st.st_mode) == 0o660):
            return
        if not os.path.exists(self.orig):
            with open(self.orig, 'w') as f:
                f.write('%d %o\n' % (st.st_gid, stat.S_IMODE(st.st_mode)))
        os.chown(self.device, -1, gid)
        os.chmod(self.device, 0o660)

    def _give_back(self):
        try:
            # Only the last holder gets kvm.users exclusively.
            self._fcntl.flock(self.users, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
        except BlockingIOError:
            return
        try:
            with open(self.orig) as f:
                gid, mode = f.read().split()
        except FileNotFoundError:
            return  # nothing was changed
        os.chown(self.device, -1, int(gid))
        os.chmod(self.device, int(mode, 8))
        os.unlink(self.orig)

    def release(self):
        if self.users is None:
            return
        self._fcntl.flock(self.mutex, self._fcntl.LOCK_EX)
        try:
            self._give_back()
        finally:
            os.close(self.users)
            os.close(self.mutex)
            self.users = self.mutex = None


class Lab:
    """The host side of one test file: the daemons, /dev/kvm's mode, a
    folder, the guest image and every domain made through it.

    Lab(build_dir) exits 77 when the host cannot run guests (host_unfit).
    Use it in a with-statement, or call close(); it is closed at exit and on
    SIGTERM too. TERN_VM_KEEP=1 keeps the folder and the domains."""

    def __init__(self, build_dir, image_args=()):
        reason = host_unfit()
        if reason:
            skip(reason)
        self.build_dir = os.path.abspath(build_dir)
        self.keep = os.environ.get('TERN_VM_KEEP') == '1'
        self.domains = []
        self.kvm = None
        self.closed = False
        # QEMU runs as libvirt-qemu: the folder (sockets, logs) must be searchable.
        self.dir = tempfile.mkdtemp(prefix='tern-vm.')
        os.chmod(self.dir, 0o755)
        print('vmlib: folder %s (console logs: NAME.console)' % self.dir)
        atexit.register(self.close)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        t0 = time.monotonic()
        self.kvm = KvmLease()
        ensure_daemons()
        self._remove_stale()
        t1 = time.monotonic()
        # QEMU opens them as libvirt-qemu, which may not reach into the build
        # folder (a home of mode 0700): each Lab boots its own copies.
        self.kernel, self.initrd = [shutil.copy(p, self.dir)
                                    for p in image(self.build_dir, image_args)]
        print('vmlib: daemons %.1f s, image %.1f s' % (t1 - t0, time.monotonic() - t1))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and exc_type is not SystemExit:
            # What the guests said is the first thing to read after a failure.
            for dom in self.domains:
                print('vmlib: %s console tail:\n%s' % (dom.name, dom.console_tail(15)))
        self.close()
        return False

    def path(self, name):
        return os.path.join(self.dir, name)

    def _remove_stale(self):
        """Domains an earlier run of this suite left behind (its pid is gone)."""
        for name in SYSTEM.domains():
            m = re.fullmatch(re.escape(NAME_PREFIX) + r'(\d+)-\d+', name)
            if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
                print('vmlib: removing %s, left by an earlier run' % name)
                remove_domain(name)

    def domain(self, script, channels=(), after='poweroff', memory_mib=192, uuid=None,
               devices_xml=''):
        """Define a domain whose guest runs @script (busybox sh; '' runs the
        image's /etc/tern/run.sh, see tools/vm-image --add). @channels:
        socket paths (port org.tern.0, org.tern.1 ...) or (path, port name)
        pairs; each socket must exist before start (libvirt stats it).
        @uuid: the domain's, when the test must know it first (ternd's
        vm-attach names the socket after it); default a random one.
        @devices_xml: more devices (an ivshmem region ...).
        Returns a Domain, not started."""
        pairs = [(c, 'org.tern.%d' % i) if isinstance(c, str) else tuple(c)
                 for i, c in enumerate(channels)]
        name = '%s%d-%d' % (NAME_PREFIX, os.getpid(), next(_domain_numbers))
        uuid = str(uuidlib.UUID(uuid) if uuid else uuidlib.uuid4())
        console_log = self.path(name + '.console')
        xml = domain_xml(name, uuid, self.kernel, self.initrd,
                         guest_cmdline(script, after, len(pairs)), console_log, pairs, memory_mib,
                         devices_xml)
        xml_path = self.path(name + '.xml')
        with open(xml_path, 'w') as f:
            f.write(xml)
        t0 = time.monotonic()
        virsh('define', xml_path, timeout=120)
        print('vmlib: defined %s in %.1f s' % (name, time.monotonic() - t0))
        dom = Domain(name, uuid, console_log)
        self.domains.append(dom)
        return dom

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.keep:
            print('vmlib: TERN_VM_KEEP=1: kept %s and domains %s'
                  % (self.dir, ' '.join(d.name for d in self.domains) or '(none)'))
        else:
            for dom in self.domains:
                remove_domain(dom.name)
        if self.kvm:
            self.kvm.release()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# Where each SecondLibvirtd notes its folder while it runs (libvirtd2.PID.PORT),
# for the next one to stop it when its owner died without doing so.
DAEMONS_NOTED = '/run/tern-vmtest'


class SecondLibvirtd(Daemon):
    """A second libvirtd on this machine, the other end of a migration
    (../shared/VM.md, "Two libvirtd on one machine").

        with vmlib.Lab(build) as lab, vmlib.SecondLibvirtd(lab.path('lv2')) as dest:
            dom = lab.domain(script, after='idle'); dom.start()
            dom.migrate(dest)               # seconds; now dom.on(dest) runs
            dom.on(dest).migrate(vmlib.SYSTEM)

    It runs in a mount namespace of its own (unshare -m) where fresh
    folders of @folder are bind-mounted over /etc/libvirt (etc/: a copy of
    the system's without its domains, networks' autostart or hooks),
    /run/libvirt (run/), /var/lib/libvirt (lib/), /var/cache/libvirt
    (cache/: a copy of the system's, so it skips the 8 s QEMU probe: make
    it after a Lab, which holds /dev/kvm's mode the cache was made with)
    and /var/log/libvirt (log/); everything else, /tmp (a Lab's folder,
    console logs, sockets) included, is the host's. It listens on
    qemu+tcp://127.0.0.1:PORT/system without authentication (@port:
    default the first free from 16510), has a host_uuid of its own (else
    libvirt refuses a migration "to the same host"), and its QEMUs listen
    for a migration on @migration_ports (default the first free of
    49300-49363 is picked per migration). QEMU's stdio goes to files
    (stdio_handler="file"), so it needs no virtlogd; no cgroups.

    @hooks: {name: script} put in its hooks/qemu.d/ (mode 0755) before it
    starts, which is when libvirt 9.0 looks for them. Attributes: uri,
    port, etc (its /etc/libvirt as seen from outside), log (its
    libvirtd.log, with its stderr), folder. virsh(*args) and domains()
    talk to it.

    stop() (also at exit, on SIGTERM through the Lab's handler, and at the
    end of a with-statement) destroys its domains, ends it and any QEMU it
    left, and removes @folder (TERN_VM_KEEP=1 keeps the folder); the
    system libvirtd and its domains are not touched. One whose owner was
    killed (SIGKILL) is stopped by the next SecondLibvirtd made."""

    PRIVATE = (('/etc/libvirt', 'etc'), ('/run/libvirt', 'run'), ('/var/lib/libvirt', 'lib'),
               ('/var/cache/libvirt', 'cache'), ('/var/log/libvirt', 'log'))

    def __init__(self, folder, hooks=None, port=None, migration_ports=(49300, 49363), timeout=60):
        if shutil.which('unshare') is None:
            skip('no unshare (util-linux) for a second libvirtd')
        self.port = port or free_port(16510, 16599)
        super().__init__('qemu+tcp://127.0.0.1:%d/system' % self.port, migration_ports)
        self.folder = os.path.abspath(folder)
        self.etc = os.path.join(self.folder, 'etc')
        self.log = os.path.join(self.folder, 'log', 'libvirtd.log')
        self.keep = os.environ.get('TERN_VM_KEEP') == '1'
        self.proc = None
        self.note = os.path.join(DAEMONS_NOTED, 'libvirtd2.%d.%d' % (os.getpid(), self.port))
        _stop_orphaned_daemons()
        os.makedirs(self.folder)
        os.chmod(self.folder, 0o755)
        self._configure(hooks or {})
        os.makedirs(DAEMONS_NOTED, exist_ok=True)
        with open(self.note, 'w') as f:
            f.write(self.folder + '\n')
        atexit.register(self.stop)
        self._start(timeout)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    def _configure(self, hooks):
        shutil.copytree('/etc/libvirt', self.etc, symlinks=True)
        shutil.copytree('/var/cache/libvirt', os.path.join(self.folder, 'cache'), symlinks=True)
        for _, sub in self.PRIVATE[1:]:
            os.makedirs(os.path.join(self.folder, sub), mode=0o755, exist_ok=True)
        qemu = os.path.join(self.etc, 'qemu')
        for f in os.listdir(qemu):
            if f.endswith('.xml'):
                os.unlink(os.path.join(qemu, f))  # the system daemon's domains
        for d in (os.path.join(qemu, 'networks', 'autostart'), os.path.join(self.etc, 'hooks')):
            shutil.rmtree(d, ignore_errors=True)
        qemu_d = os.path.join(self.etc, 'hooks', 'qemu.d')
        os.makedirs(qemu_d)
        for name, script in hooks.items():
            if not name or '/' in name or name.startswith('.'):
                raise ValueError('a hook name must be a plain file name, not %r' % name)
            path = os.path.join(qemu_d, name)
            with open(path, 'w') as f:
                f.write(script)
            os.chmod(path, 0o755)
        with open(os.path.join(self.etc, 'libvirtd.conf'), 'a') as f:
            f.write('\n# vmlib.SecondLibvirtd\nlisten_tcp = 1\nlisten_tls = 0\ntcp_port = "%d"\n'
                    'listen_addr = "127.0.0.1"\nauth_tcp = "none"\nhost_uuid = "%s"\n'
                    'log_outputs = "3:file:/var/log/libvirt/libvirtd.log"\n'
                    % (self.port, uuidlib.uuid4()))
        with open(os.path.join(self.etc, 'qemu.conf'), 'a') as f:
            f.write('\n# vmlib.SecondLibvirtd\nstdio_handler = "file"\ncgroup_controllers = [ ]\n'
                    'migration_port_min = %d\nmigration_port_max = %d\n' % self.migration_ports)

    def _start(self, timeout):
        binds = ' && '.join('mount --bind %s %s' % (shlex.quote(os.path.join(self.folder, sub)), target)
                            for target, sub in self.PRIVATE)
        # Its own pid file: the default, /run/libvirtd.pid, is the system daemon's.
        script = '%s && exec libvirtd --listen --pid-file %s' % (
            binds, shlex.quote(os.path.join(self.folder, 'libvirtd.pid')))
        t0 = time.monotonic()
        with open(self.log, 'a') as log:
            self.proc = subprocess.Popen(['unshare', '--mount', '--propagation', 'private',
                                          'sh', '-c', script], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def answers():
            if self.proc.poll() is not None:
                raise VmError('the second libvirtd exited %d; its log %s ends:\n%s'
                              % (self.proc.returncode, self.log, self.log_tail()))
            return self.virsh('version', timeout=30, check=False).returncode == 0
        try:
            wait_for(answers, timeout, 'the second libvirtd answering on ' + self.uri)
        except VmError:
            self.stop()
            raise
        print('vmlib: second libvirtd at %s in %.1f s (folder %s, log %s)'
              % (self.uri, time.monotonic() - t0, self.folder, self.log))

    def log_tail(self, lines=20):
        return file_tail(self.log, lines)

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                for name in self.domains():
                    remove_domain(name, self)
            except VmError as e:
                print('vmlib: the second libvirtd: %s' % e)
        process_stop(proc)
        _kill_daemon_left(self.folder)
        os.unlink(self.note)
        if self.keep:
            print('vmlib: TERN_VM_KEEP=1: kept %s' % self.folder)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)


def _kill_daemon_left(folder):
    """SIGKILL what a SecondLibvirtd in @folder left running: the daemon,
    and its QEMUs (they leave libvirtd's process group), by their pid files
    (checked against /proc, in case the pid was reused)."""
    pid_files = [os.path.join(folder, 'libvirtd.pid')]
    qemu_run = os.path.join(folder, 'run', 'qemu')
    if os.path.isdir(qemu_run):
        pid_files += [os.path.join(qemu_run, f) for f in os.listdir(qemu_run) if f.endswith('.pid')]
    for path in pid_files:
        try:
            with open(path) as f:
                pid = int(f.read().split()[0])
            with open('/proc/%d/cmdline' % pid, 'rb') as f:
                argv0 = os.path.basename(f.read().split(b'\0')[0])
        except (OSError, ValueError, IndexError):
            continue
        if argv0 == b'libvirtd' or argv0.startswith(b'qemu-system'):
            os.kill(pid, signal.SIGKILL)


def _stop_orphaned_daemons():
    """Stop the second libvirtds noted in DAEMONS_NOTED whose owner is gone."""
    try:
        notes = os.listdir(DAEMONS_NOTED)
    except FileNotFoundError:
        return
    for note in notes:
        m = re.fullmatch(r'libvirtd2\.(\d+)\.\d+', note)
        if not m or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(DAEMONS_NOTED, note)
        with open(path) as f:
            folder = f.read().strip()
        print('vmlib: stopping the second libvirtd of %s, left by an earlier run' % folder)
        _kill_daemon_left(folder)
        shutil.rmtree(folder, ignore_errors=True)
        os.unlink(path)


def _group_id(name):
    import grp
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


if __name__ == '__main__':
    # For a person at the machine: `python3 tests/vm/vmlib.py daemons`
    # starts what the suite needs; `cleanup` removes every test domain.
    if len(sys.argv) != 2 or sys.argv[1] not in ('daemons', 'cleanup'):
        sys.exit('usage: vmlib.py daemons|cleanup')
    reason = host_unfit()
    if reason:
        sys.exit(reason)
    ensure_daemons()
    if sys.argv[1] == 'cleanup':
        for n in SYSTEM.domains():
            if n.startswith(NAME_PREFIX):
                print('removing %s' % n)
                remove_domain(n)
