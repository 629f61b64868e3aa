#!/usr/bin/env python3
"""ivshmem in a real guest (docs/vm-transport.md, "ivshmem"): a TCG domain
with tern's channel to ternd's domain socket and an ivshmem-plain device
(<shmem name='tern-UUID'>, role master), tern-agent on the port, and
ckpt_loop through the shim's virtio: URL. The shim finds the BAR on the PCI
bus (1af4:1110's resource2), ternd maps libvirt's /dev/shm/tern-UUID, and
the session's rings move into a slot of it: both sides say so, the BAR's
header is ternd's layout, and the checksum equals a run on the host.
Then the same with a `virsh save` and `restore` while ckpt_loop runs, ternd
told as tern-libvirt and the hook would (vm-save after the save, vm-restore
before the restore): the program goes on, attaches to a slot again, and
ends with the uninterrupted checksum.

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
# The saved run: a mark at iteration 20, then 50 ms a step.
SAVED = (150, 20, 50)
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
TERN_SERVER=virtio:/dev/virtio-ports/org.tern.0 TERN_LOG_LEVEL=info TERN_LOG_FILE=/run/shim2.log \
    ckpt_loop %(saved_iter)d %(saved_mark)d /run/mark %(saved_step)d >/run/out2 2>&1 &
while [ ! -e /run/mark ]; do usleep 20000; done
echo "IVSHMEM MARKED"
wait $!
echo "IVSHMEM2 ckpt_loop exit $?"
cat /run/out2
echo "IVSHMEM2 shim log:"; cat /run/shim2.log
echo "IVSHMEM2 end"
'''


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
            dom = lab.domain(GUEST % {'iterations': ITERATIONS, 'saved_iter': SAVED[0], 'saved_mark': SAVED[1],
                                      'saved_step': SAVED[2]},
                             channels=[r['path']], after='idle', uuid=uuid, devices_xml=shmem)
            dom.start()
            m = dom.wait_console(r'IVSHMEM end', TIMEOUT)
            out = dom.console()
            ex = re.search(r'IVSHMEM ckpt_loop exit (\d+)', out)
            if not ex or ex.group(1) != '0' or 'PASS ckpt_loop' not in out:
                raise vmlib.VmError('ckpt_loop in the guest failed; console tail:\n%s' % dom.console_tail(60))
            if 'ivshmem BAR /sys/bus/pci/devices/' not in out or 'on ivshmem slot' not in out:
                raise vmlib.VmError('the guest\'s shim did not find the BAR on the PCI bus or did not '
                                    'move onto it:\n%s' % out[-3000:])
            in_guest = vmlib.checksum(out, 'ckpt_loop in the guest')
            log = open(os.path.join(ternd.dir, 'ternd.log'), errors='replace').read()
            if 'on ivshmem %s slot' % bar not in log:
                raise vmlib.VmError('ternd\'s worker did not take a slot of %s:\n%s' % (bar, log[-3000:]))
            with open(bar, 'rb') as f:
                head = f.read(64)
            magic, version, hbytes, bar_bytes, slot_bytes, count = struct.unpack_from('<QIIQQI', head)
            if magic != 0x3152414253564954 or bar_bytes != BAR_MIB << 20 or slot_bytes != SLOT or count != 3:
                raise vmlib.VmError('the BAR header is not ternd\'s layout: %r' % head)

            # virsh save while the second run calls, then restore.
            since = dom.console_size()
            dom.wait_console(r'IVSHMEM MARKED', TIMEOUT)
            image = lab.path('saved.img')
            dom.save(image)
            r = control_request(ternd.control, {'op': 'vm-save', 'uuid': uuid, 'generation': '1a'}, 120)
            if not r.get('ok') or len(r.get('snapshots', [])) != 1:
                raise vmlib.VmError('vm-save: %s' % r)
            r = control_request(ternd.control, {'op': 'vm-restore', 'uuid': uuid, 'generation': '1a'}, 120)
            if not r.get('ok'):
                raise vmlib.VmError('vm-restore: %s' % r)
            dom.restore(image)
            dom.wait_console(r'IVSHMEM2 end', TIMEOUT, since=since)
            out2 = dom.console(since)
            ex = re.search(r'IVSHMEM2 ckpt_loop exit (\d+)', out2)
            if not ex or ex.group(1) != '0':
                raise vmlib.VmError('ckpt_loop across the save failed; console tail:\n%s' % dom.console_tail(80))
            if out2.count('on ivshmem slot') < 2:
                raise vmlib.VmError('the program did not attach to a slot before and after the restore:\n%s'
                                    % out2[-4000:])
            saved = vmlib.checksum(out2, 'ckpt_loop across the save')
            dom.destroy()

            env = dict(os.environ, TERN_SERVER=ternd.unix, LD_LIBRARY_PATH=os.path.join(build, 'guest-shim'))
            r = subprocess.run([os.path.join(build, 'tests', 'cuda', 'ckpt_loop'), str(ITERATIONS)],
                               env=env, stdout=subprocess.PIPE, text=True, timeout=TIMEOUT)
            on_host = vmlib.checksum(r.stdout, 'ckpt_loop on the host')
            r = subprocess.run([os.path.join(build, 'tests', 'cuda', 'ckpt_loop'), str(SAVED[0])],
                               env=env, stdout=subprocess.PIPE, text=True, timeout=TIMEOUT)
            if saved != vmlib.checksum(r.stdout, 'ckpt_loop on the host'):
                raise vmlib.VmError('across virsh save and restore the guest computed another checksum')
            print('ckpt_loop %d iterations across virsh save and restore, on ivshmem before and after: '
                  'the uninterrupted checksum %s' % (SAVED[0], saved))
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
