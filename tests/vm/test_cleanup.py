#!/usr/bin/env python3
"""vmlib leaves no domain behind: a test stopped by SIGTERM (meson's
timeout) while its guest runs removes the domain and its folder; one
killed by SIGKILL leaves its domain, which the next Lab removes (its pid
is gone); a Lab that ends normally removes a domain with a managed save
image too.

usage: test_cleanup.py BUILD_DIR
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vmlib  # noqa: E402

check = vmlib.Checks()

# The child: a Lab with one running domain, which says so and waits.
CHILD = r'''
import sys, time
sys.path.insert(0, %(here)r)
import vmlib
lab = vmlib.Lab(%(build)r)
dom = lab.domain('sleep 600', after='idle')
vmlib.virsh('start', dom.name)
print('STARTED %%s %%s' %% (dom.name, lab.dir), flush=True)
time.sleep(600)
'''


def domain_exists(name):
    return vmlib.virsh('domstate', name, timeout=30, check=False).returncode == 0


def child_lab(build):
    """A child with a running domain: (process, domain name, Lab folder)."""
    code = CHILD % {'here': os.path.dirname(os.path.abspath(__file__)), 'build': build}
    proc = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if line.startswith('STARTED '):
            _, name, folder = line.split()
            return proc, name, folder
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise vmlib.VmError('the child Lab never started its domain')


def main():
    build = os.path.abspath(sys.argv[1])
    if vmlib.host_unfit():
        vmlib.skip(vmlib.host_unfit())

    proc, name, folder = child_lab(build)
    check(domain_exists(name), 'the child defined and started %s' % name)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(60)
    check(rc != 0 and not domain_exists(name) and not os.path.exists(folder),
          'SIGTERM: exit %d, domain and folder removed' % rc)

    proc, name, folder = child_lab(build)
    proc.kill()
    proc.wait(60)
    check(domain_exists(name), 'SIGKILL: the domain is left behind')
    with vmlib.Lab(build) as lab:
        check(not domain_exists(name), 'the next Lab removed it (its pid is gone)')
        dom = lab.domain('sleep 600', after='idle')
        dom.start()
        dom.managedsave()
        managed = vmlib.virsh('dominfo', dom.name).stdout
        check('Managed save:   yes' in managed, 'a managed save image exists')
    check(not domain_exists(dom.name), 'a Lab that ends removes a domain with a managed save image')
    shutil.rmtree(folder, ignore_errors=True)  # the SIGKILLed child's
    check.finish('vm_cleanup')


if __name__ == '__main__':
    vmlib.test_main(main)
