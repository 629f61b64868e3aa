#!/usr/bin/env python3
"""ivshmem in a real guest (docs/vm-transport.md, "ivshmem"): a TCG domain
with tern's channel to ternd's domain socket and an ivshmem-plain device
(<shmem name='tern-UUID'>, role master), tern-agent on the port, and
ckpt_loop through the shim's virtio: URL. The shim finds the BAR on the PCI
bus (1af4:1110's resource2), ternd maps libvirt's /dev/shm/tern-UUID, and
the session's rings move into a slot of it: both sides say so, the BAR's
header is ternd's layout, and the checksum equals a run on the host.

usage: test_ivshmem.py BUILD_DIR
"""
import os
import re
import struct
import subprocess
import sys
import time
import uuid as uuidlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'security'))
import vmlib  # noqa: E402
from hostile import Ternd, control_request  # noqa: E402

ITERATIONS = 30
TIMEOUT = 180
BAR_MIB = 64            # a PCI BAR: a power of two; 3 slots of 16 MiB
SLOT = 16 << 20

GUEST = r'''
tern-agent --log-level info >/run/agent.log 2>&1 &
for i in $(seq 100); do [ -S /run/tern/agent-org.tern.0.sock ] && break; usleep 100000; done
TERN_SERVER=virtio:/dev/virtio-ports/org.tern.0 TERN_LOG_LEVEL=info TERN_LOG_FILE=/run/shim.log \
    ckpt_loop %(iterations)d
echo "IVSHMEM ckpt_loop exit $?"
echo "IVSHMEM shim log:"; cat /run/shim.log
echo "IVSHMEM end"
'''


def checksum(text, where):
    m = re.search(r'CHECKSUM ([0-9a-f]+)', text)
    if not m:
        raise vmlib.VmError('%s printed no CHECKSUM:\n%s' % (where, text[-2000:]))
    return m.group(1)


def main():
    build = sys.argv[1]
    lab = vmlib.Lab(build)
    uuid = str(uuidlib.uuid4())
    bar = '/dev/shm/tern-' + uuid
    vm_dir = '/run/tern-vmtest-%d' % os.getpid()
    ternd = Ternd(os.path.join(build, 'replayer', 'ternd'), tcp=False,
                  args=['--sim-kernels', os.path.join(build, 'tests', 'cuda', 'libtern_test_kernels.so'),
                        '--vm-dir', vm_dir, '--ivshmem-dir', '/dev/shm', '--ivshmem-slot', str(SLOT),
                        '--log-level', 'info'])
    try:
        with lab:
            r = control_request(ternd.control, {'op': 'vm-attach', 'uuid': uuid, 'name': 'ivshmem-test'})
            if not r.get('ok'):
                raise vmlib.VmError('vm-attach: %s' % r)
            shmem = ("    <shmem name='tern-%s' role='master'><model type='ivshmem-plain'/>"
                     "<size unit='M'>%d</size></shmem>\n" % (uuid, BAR_MIB))
            dom = lab.domain(GUEST % {'iterations': ITERATIONS}, channels=[r['path']], after='idle',
                             uuid=uuid, devices_xml=shmem)
            dom.start()
            m = dom.wait_console(r'IVSHMEM end', TIMEOUT)
            out = dom.console()
            ex = re.search(r'IVSHMEM ckpt_loop exit (\d+)', out)
            if not ex or ex.group(1) != '0' or 'PASS ckpt_loop' not in out:
                raise vmlib.VmError('ckpt_loop in the guest failed; console tail:\n%s' % dom.console_tail(60))
            if 'ivshmem BAR /sys/bus/pci/devices/' not in out or 'on ivshmem slot' not in out:
                raise vmlib.VmError('the guest\'s shim did not find the BAR on the PCI bus or did not '
                                    'move onto it:\n%s' % out[-3000:])
            in_guest = checksum(out, 'ckpt_loop in the guest')
            log = open(os.path.join(ternd.dir, 'ternd.log'), errors='replace').read()
            if 'on ivshmem %s slot' % bar not in log:
                raise vmlib.VmError('ternd\'s worker did not take a slot of %s:\n%s' % (bar, log[-3000:]))
            with open(bar, 'rb') as f:
                head = f.read(64)
            magic, version, hbytes, bar_bytes, slot_bytes, count = struct.unpack_from('<QIIQQI', head)
            if magic != 0x3152414253564954 or bar_bytes != BAR_MIB << 20 or slot_bytes != SLOT or count != 3:
                raise vmlib.VmError('the BAR header is not ternd\'s layout: %r' % head)
            dom.destroy()

            env = dict(os.environ, TERN_SERVER=ternd.unix, LD_LIBRARY_PATH=os.path.join(build, 'guest-shim'))
            r = subprocess.run([os.path.join(build, 'tests', 'cuda', 'ckpt_loop'), str(ITERATIONS)],
                               env=env, stdout=subprocess.PIPE, text=True, timeout=TIMEOUT)
            on_host = checksum(r.stdout, 'ckpt_loop on the host')
            print('ckpt_loop %d iterations over ivshmem in the guest: checksum %s, on the host %s; '
                  'BAR %d MiB, %d slots of %d MiB' % (ITERATIONS, in_guest, on_host, BAR_MIB, count, SLOT >> 20))
            if in_guest != on_host:
                raise vmlib.VmError('the guest computed another checksum than the host')
    finally:
        ternd.stop()
        for p in (bar,):
            try:
                os.unlink(p)
            except OSError:
                pass
        subprocess.call(['rm', '-rf', vm_dir])
    print('PASS vm_ivshmem')


if __name__ == '__main__':
    vmlib.test_main(main)
