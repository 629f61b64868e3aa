#!/usr/bin/env python3
"""tools/vm-image on a stand-in build folder: what goes into the initramfs
(the shim at /usr/lib/libcuda.so.1, tern-agent when the build has it, the
CUDA programs asked for, --add files, the libraries ldd names, the loader
cache, the modules in order, the init), that an unchanged input rebuilds
nothing and a changed one rebuilds, and what it refuses (a missing shim,
a missing program, a missing --add file, a relative guest path, an
unknown option), each with its reason; where guests can run, that image
boots from its 0700 folder and runs its own /etc/tern/run.sh. Needs the
kernel package (cached in /var/cache/tern/vm, or downloaded once).

usage: test_image.py BUILD_DIR
"""
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmlib  # noqa: E402

VM_IMAGE = os.path.join(vmlib.TOP, 'tools', 'vm-image')
check = vmlib.Checks()


def vm_image(*args):
    return subprocess.run([VM_IMAGE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)


def cpio_names(path):
    with gzip.open(path) as f:
        data = f.read()
    r = subprocess.run(['/bin/busybox', 'cpio', '-t'], input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, check=True)
    return set(r.stdout.decode().split())


def cpio_file(path, name):
    with tempfile.TemporaryDirectory() as d:
        with gzip.open(path) as f:
            subprocess.run(['/bin/busybox', 'cpio', '-i', '-d', name], input=f.read(), cwd=d,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        with open(os.path.join(d, name), 'rb') as f:
            return f.read()


def boot_image_script(fake):
    """The image's own /etc/tern/run.sh runs when the test gives no script,
    its exit status reported; and the build folder (mkdtemp: 0700) need not
    be reachable by QEMU's user."""
    reason = vmlib.host_unfit()
    if reason:
        print('boot of the image script: skipped (%s)' % reason)
        return
    script = os.path.join(fake, 'run.sh')
    with open(script, 'w') as f:
        f.write('echo "the image\'s own script"\nexit 4\n')
    with vmlib.Lab(fake, image_args=['--add', script + ':/etc/tern/run.sh']) as lab:
        dom = lab.domain('')
        dom.start()
        status = dom.wait_exit(60)
        check(status == 4 and "the image's own script" in dom.console(),
              'no script given: the image\'s /etc/tern/run.sh ran, exit %d reported, from a 0700 '
              'build folder' % status)


def main():
    real = os.path.abspath(sys.argv[1])
    fake = tempfile.mkdtemp(prefix='tern-vm-image-')
    try:
        os.makedirs(os.path.join(fake, 'guest-shim'))
        os.makedirs(os.path.join(fake, 'tests', 'cuda'))
        shim = os.path.join(fake, 'guest-shim', 'libcuda.so.1')
        r = vm_image(fake)
        check(r.returncode != 0 and 'libcuda.so.1 is missing' in r.stdout,
              'no shim: refused, saying so (%s)' % r.stdout.strip().splitlines()[-1])
        shutil.copy(os.path.join(real, 'guest-shim', 'libcuda.so.1'), shim)
        r = vm_image(fake)
        check(r.returncode != 0 and 'tests/cuda/ckpt_loop is missing' in r.stdout,
              'no ckpt_loop: refused, saying so')
        shutil.copy(os.path.join(real, 'tests', 'cuda', 'ckpt_loop'), os.path.join(fake, 'tests', 'cuda'))
        for args, why in ((['--add', '/nonexistent/x'], 'no such file'),
                          (['--add', '/bin/true:usr/bin/t'], 'must be absolute'),
                          (['--frobnicate'], 'unknown option')):
            r = vm_image(*args, fake)
            check(r.returncode != 0 and why in r.stdout, '%s: refused (%s)' % (' '.join(args), why))

        r = vm_image(fake)
        initrd = os.path.join(fake, 'vm', 'initramfs.gz')
        check(r.returncode == 0 and os.path.exists(initrd) and os.path.exists(os.path.join(fake, 'vm', 'vmlinuz')),
              'a kernel and an initramfs are made: %s' % r.stdout.strip().splitlines()[-1])
        if r.returncode:
            print(r.stdout)
            return
        names = cpio_names(initrd)
        want = ['init', 'usr/lib/libcuda.so.1', 'usr/bin/ckpt_loop', 'bin/busybox', 'bin/sh',
                'etc/ld.so.cache', 'lib64/ld-linux-x86-64.so.2', 'lib/x86_64-linux-gnu/libc.so.6',
                'lib/x86_64-linux-gnu/libstdc++.so.6', 'lib/modules/virtio_console.ko', 'lib/modules/order']
        missing = [n for n in want if n not in names]
        check(not missing, 'the image has the init, shim, ckpt_loop, busybox, libraries, loader cache '
              'and modules (missing: %s)' % (missing or 'none'))
        check('usr/bin/tern-agent' not in names, 'no tern-agent when the build has none')
        order = cpio_file(initrd, 'lib/modules/order').decode().split()
        check(order == ['virtio_ring', 'virtio', 'virtio_pci_modern_dev', 'virtio_pci_legacy_dev',
                        'virtio_pci', 'virtio_console'], 'the modules load in the order they depend '
              'on each other: %s' % ' '.join(order))
        check(cpio_file(initrd, 'usr/lib/libcuda.so.1') == open(shim, 'rb').read(),
              'the shim in the image is the build\'s, byte for byte')

        check(b'/usr/lib/libcuda.so.1' in cpio_file(initrd, 'etc/ld.so.cache'),
              'the loader cache finds /usr/lib/libcuda.so.1 (no LD_LIBRARY_PATH in the guest)')

        r = vm_image(fake)
        check(r.returncode == 0 and 'up to date' in r.stdout, 'nothing changed: nothing rebuilt')

        os.makedirs(os.path.join(fake, 'guest-agent'))
        shutil.copy('/bin/true', os.path.join(fake, 'guest-agent', 'tern-agent'))
        r = vm_image('--add', '/bin/false:/opt/t/false', fake)
        names = cpio_names(initrd)
        check(r.returncode == 0 and 'up to date' not in r.stdout and 'usr/bin/tern-agent' in names
              and 'opt/t/false' in names, 'an agent in the build and an --add file: rebuilt, both in')
        boot_image_script(fake)
    finally:
        shutil.rmtree(fake, ignore_errors=True)
    check.finish('vm_image')


if __name__ == '__main__':
    main()
