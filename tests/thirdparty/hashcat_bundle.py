"""Debian 12's hashcat as tools/thirdparty-bundle carries it (.carry/hashcat),
for tests/thirdparty/run (its CUDA backend) and tests/opencl/thirdparty (its
OpenCL backend): a fresh portable copy per run, and the crack both run."""
import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MD5_OF_HASHCAT = '8743b52063cd84097a65d1633f5c74f5'     # md5("hashcat")
CRACKED = MD5_OF_HASHCAT + ':hashcat'


def home(tmp, tag):
    """A copy of the bundle of its own (hashcat keeps its kernel cache
    beside itself), or None and why not."""
    bundle = os.path.join(REPO, '.carry', 'hashcat')
    if not os.path.exists(os.path.join(bundle, 'hashcat')):
        return None, 'no bundle: run tools/thirdparty-bundle and carry .carry/hashcat'
    dest = os.path.join(tmp, 'hashcat-' + tag)
    shutil.copytree(bundle, dest)
    subprocess.run(['tar', '-C', dest, '-xJf', os.path.join(dest, 'OpenCL.tar.xz')], check=True)
    return dest, None


def crack_cmd(dest, backend_args):
    """An MD5 mask attack on md5("hashcat") with @backend_args choosing the backend."""
    return ([os.path.join(dest, 'hashcat'), '-m', '0', '-a', '3', '--potfile-disable'] + backend_args +
            ['--hwmon-disable', '--quiet', MD5_OF_HASHCAT, '?l?l?l?l?l?l?l'])


def libs(dest):
    return [os.path.join(dest, 'lib')]
