#!/usr/bin/env python3
"""vmlib's parts that need no libvirt: the kernel command line the guest's
init decodes (also decoded here by the image's own init, run by busybox on
the host), the domain XML with hostile names and paths, and the /dev/kvm
lease on a stand-in file (several holders, a holder that died), and
free_port.

usage: test_vmlib.py
"""
import atexit
import base64
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmlib  # noqa: E402

check = vmlib.Checks()


def test_cmdline():
    script = "echo 'quoted' \"and\" $HOME\n\tprintf '%s\\n' a=b c\n"
    line = vmlib.guest_cmdline(script, 'idle', 2)
    words = dict(w.split('=', 1) for w in line.split() if '=' in w)
    check(' ' not in words['tern.run'], 'the script rides on the command line as one word')
    check(base64.b64decode(words['tern.run']).decode() == script, 'the script decodes back exactly')
    check(words['tern.after'] == 'idle' and words['tern.ports'] == '2', 'after and ports are passed')
    try:
        vmlib.guest_cmdline('x' * vmlib.CMDLINE_MAX, 'poweroff', 1)
        check(False, 'a script too long for the kernel command line is refused')
    except vmlib.VmError as e:
        check('too long' in str(e), 'a script too long for the kernel command line is refused: %s' % e)
    try:
        vmlib.guest_cmdline('true', 'reboot; rm -rf /', 1)
        check(False, 'an unknown after= is refused')
    except ValueError:
        check(True, 'an unknown after= is refused')


def test_domain_xml():
    hostile = "a'b\"c<d>&e"
    xml = vmlib.domain_xml('tern-vmtest-1-0', '00000000-0000-4000-8000-000000000000',
                           '/k/' + hostile, '/i/' + hostile, 'console=ttyS0 x=' + hostile,
                           '/log/' + hostile, [('/s/' + hostile, 'org.tern.0'), ('/t', 'org.tern.1')], 160,
                           "<shmem name='tern-x'><model type='ivshmem-plain'/></shmem>\n")
    try:
        dom = ET.fromstring(xml)
    except ET.ParseError as e:
        check(False, 'the domain XML with quotes, <, > and & in paths parses: %s' % e)
        return
    check(dom.get('type') == 'qemu', 'a TCG domain')
    check(dom.findtext('os/kernel') == '/k/' + hostile and dom.findtext('os/initrd') == '/i/' + hostile,
          'kernel and initrd paths come back exactly')
    check(dom.findtext('os/cmdline') == 'console=ttyS0 x=' + hostile, 'the command line comes back exactly')
    chans = dom.findall('devices/channel')
    check([c.find('source').get('path') for c in chans] == ['/s/' + hostile, '/t'] and
          [c.find('target').get('name') for c in chans] == ['org.tern.0', 'org.tern.1'] and
          all(c.find('source').get('mode') == 'connect' and
              c.find('source/reconnect').get('enabled') == 'yes' for c in chans),
          'each channel: its socket in connect mode with reconnect, its port name')
    check(dom.find('devices/serial/source').get('path') == '/log/' + hostile and
          dom.find('devices/serial/source').get('append') == 'on',
          'the console log path, appended to across save and restore')
    check(dom.find('features/acpi') is not None and dom.find('devices/memballoon').get('model') == 'none'
          and dom.findtext('memory') == '160', 'acpi, no balloon, the memory asked for')
    check(dom.find('devices/shmem').get('name') == 'tern-x', 'extra devices are in <devices>')


def test_kvm_lease():
    d = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, d, True)
    dev = os.path.join(d, 'kvm')
    open(dev, 'w').close()
    os.chmod(dev, 0o600)
    state = os.path.join(d, 'state')

    def mode():
        st = os.stat(dev)
        return st.st_gid, stat.S_IMODE(st.st_mode)

    before = mode()
    kvm = vmlib._group_id('kvm')
    if kvm is None or os.geteuid() != 0:
        print('kvm lease: skipped (needs root and a kvm group)')
        return
    a = vmlib.KvmLease(dev, state)
    b = vmlib.KvmLease(dev, state)
    check(mode() == (kvm, 0o660), 'a lease makes the device kvm:0660')
    a.release()
    check(mode() == (kvm, 0o660), 'the mode stays while another lease is held')
    b.release()
    check(mode() == before, 'the last lease puts the old mode back')
    c = vmlib.KvmLease(dev, state)
    os.close(c.users)  # its holder dies without giving it back
    os.close(c.mutex)
    e = vmlib.KvmLease(dev, state)
    e.release()
    check(mode() == before, 'after a holder died, the next lease to end restores the mode')
    os.chmod(dev, 0o660)
    os.chown(dev, -1, kvm)
    f = vmlib.KvmLease(dev, state)
    f.release()
    check(mode() == (kvm, 0o660), 'a device already right is left as it was')


def test_init_reads_cmdline():
    """The image's init, as written by tools/vm-image, decodes what
    guest_cmdline encodes: its parsing part run by busybox sh on the host."""
    r = subprocess.run([os.path.join(vmlib.TOP, 'tools', 'vm-image'), '--print-init'],
                       stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        check(False, 'tools/vm-image --print-init prints the init')
        return
    init = r.stdout
    start = init.index('run= after=poweroff ports=1')
    end = init.index('for m in $(cat /lib/modules/order)')
    parse = init[start:end].replace('$(cat /proc/cmdline)', '$CMDLINE')
    script = "echo one 'two three'\nexit 3\n"
    probe = parse + 'echo "$run" | base64 -d >"$OUT"; echo "after=$after ports=$ports"\n'
    d = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, d, True)
    target = os.path.join(d, 'decoded.sh')
    env = dict(os.environ, CMDLINE=vmlib.guest_cmdline(script, 'idle', 3), OUT=target)
    r = subprocess.run(['/bin/busybox', 'sh', '-c', probe], env=env, stdout=subprocess.PIPE, text=True)
    with open(target) as f:
        decoded = f.read()
    check(decoded == script, "the guest's init decodes the script exactly")
    check(r.stdout.strip() == 'after=idle ports=3', "the guest's init reads after= and ports=: %r"
          % r.stdout.strip())


def test_free_port():
    """A port someone listens on is skipped; one that a daemon's
    connection left in TIME_WAIT is not (libvirtd and QEMU bind with
    SO_REUSEADDR, and so may bind it again)."""
    import socket
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as libvirtd's and QEMU's
    held.bind(('127.0.0.1', 0))
    held.listen(1)
    port = held.getsockname()[1]
    check(vmlib.free_port(port, port + 1) == port + 1, 'free_port skips a port in use')
    client = socket.create_connection(('127.0.0.1', port))
    conn, _ = held.accept()
    conn.close()  # the server's side closes first: its port is left in TIME_WAIT
    client.close()
    held.close()
    check(vmlib.free_port(port, port) == port, 'free_port takes a port left in TIME_WAIT')
    try:
        vmlib.free_port(port, port - 1)
        check(False, 'free_port fails on an empty range')
    except vmlib.VmError:
        check(True, 'free_port fails on an empty range')


def main():
    test_cmdline()
    test_free_port()
    test_domain_xml()
    test_kvm_lease()
    if os.path.exists('/bin/busybox'):
        test_init_reads_cmdline()
    else:
        print('init command line: skipped (no /bin/busybox)')
    check.finish('vm_vmlib')


if __name__ == '__main__':
    main()
