"""What the OpenCL tests and benchmarks share (docs/opencl.md, "Tests"): a
ternd for OpenCL sessions, the loader's vendor folders that show a program
only tern's platform or only one host platform, and the environment of a
program run through tern.

The host platform is TERN_OPENCL_PLATFORM's (a part of its name, as ternd's
--opencl-platform takes it; unset: the loader's first), the backend
TERN_TEST_BACKEND's (sim unless cuda is asked for).

TERN_OPENCL_LOADER_DIR names a folder whose libOpenCL.so.1 every run uses
(the programs, ternd's worker, the platform probes): ocl-icd, carried to
the GPU machine (tools/gpu-bundle), whose Khronos loader was seen to
ignore OCL_ICD_VENDORS, so that a run "through tern" ran on the host's
platforms directly. Ternd.require_served() makes such a run fail.
"""
import glob
import os
import shutil
import socket
import subprocess
import sys
import time

SYSTEM_VENDORS = '/etc/OpenCL/vendors'
KNOWN_VENDOR_LIBRARIES = ['libnvidia-opencl.so.1', 'libpocl.so.2']

# The platforms an ICD offers, asked in a process of their own: the loader
# reads OCL_ICD_VENDORS once.
_PLATFORM_NAMES = r'''
import ctypes, sys
cl = ctypes.CDLL("libOpenCL.so.1")
n = ctypes.c_uint(0)
if cl.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0:
    sys.exit(0)
ids = (ctypes.c_void_p * n.value)()
cl.clGetPlatformIDs(n.value, ids, None)
for p in ids:
    name = ctypes.create_string_buffer(1024)
    cl.clGetPlatformInfo(ctypes.c_void_p(p), 0x0902, 1024, name, None)   # CL_PLATFORM_NAME
    print(name.value.decode(errors="replace"))
'''


def with_loader(env):
    """@env with TERN_OPENCL_LOADER_DIR's loader first, when one is named."""
    loader = os.environ.get('TERN_OPENCL_LOADER_DIR')
    if loader:
        env['LD_LIBRARY_PATH'] = ':'.join(p for p in (loader, env.get('LD_LIBRARY_PATH')) if p)
    return env


def loader_library():
    """The loader ternd's worker opens (its --opencl-library), or None."""
    loader = os.environ.get('TERN_OPENCL_LOADER_DIR')
    return os.path.join(loader, 'libOpenCL.so.1') if loader else None


def platform_name():
    return os.environ.get('TERN_OPENCL_PLATFORM') or None


def backend():
    return os.environ.get('TERN_TEST_BACKEND', 'sim')


def vendor_folder(tmp, name, icd_lines):
    """A folder for OCL_ICD_VENDORS whose one vendor file is @icd_lines."""
    folder = os.path.join(tmp, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name + '.icd'), 'w') as f:
        f.write(icd_lines)
    return folder


def platforms_of(vendors):
    """The names of the platforms the loader finds in the folder @vendors."""
    return platform_names(with_loader(dict(os.environ, OCL_ICD_VENDORS=vendors)))


def platform_names(env):
    """The names of the platforms a program run with @env finds."""
    p = subprocess.run([sys.executable, '-c', _PLATFORM_NAMES], capture_output=True, text=True,
                       env=env, timeout=120)
    return p.stdout.splitlines()


_host_vendors = {}


def host_env(tmp):
    """The environment of a direct run: only the named host platform's
    vendor file when a platform is named (the GPU machine also lists PoCL),
    the system's otherwise. Exits 77 when no vendor file offers it. The
    folder found is kept per @tmp: each probe starts a process."""
    env = with_loader(dict(os.environ))
    if tmp in _host_vendors:
        env['OCL_ICD_VENDORS'] = _host_vendors[tmp]
        return env
    want = platform_name()
    if not want:
        return env
    env['OCL_ICD_VENDORS'] = _host_vendors[tmp] = _host_vendor_folder(tmp, want)
    return env


def _host_vendor_folder(tmp, want):
    for icd in sorted(glob.glob(os.path.join(SYSTEM_VENDORS, '*.icd'))):
        folder = os.path.join(tmp, 'host-' + os.path.basename(icd)[:-4])
        os.makedirs(folder, exist_ok=True)
        shutil.copy(icd, folder)
        if any(want in n for n in platforms_of(folder)):
            return folder
    # A vendor library installed without its vendor file (the GPU machine's
    # NVIDIA driver: /etc/OpenCL/vendors holds PoCL's only).
    for lib in KNOWN_VENDOR_LIBRARIES:
        folder = vendor_folder(tmp, 'host-' + lib.split('.')[0], lib + '\n')
        if any(want in n for n in platforms_of(folder)):
            return folder
    print('no host OpenCL platform named "%s" in %s or %s' % (want, SYSTEM_VENDORS,
                                                          ', '.join(KNOWN_VENDOR_LIBRARIES)))
    sys.exit(77)


class Ternd:
    """A ternd on a temporary socket serving OpenCL sessions from the
    host's platform (platform_name()) over @transport: unix, shm or tcp."""

    def __init__(self, build, tmp, transport):
        self.build, self.tmp, self.transport = build, tmp, transport
        self.sock = os.path.join(tmp, 'ternd.sock')
        self.log = os.path.join(tmp, 'ternd.log')
        self.token = None
        if transport == 'tcp':
            with socket.socket() as probe:
                probe.bind(('127.0.0.1', 0))
                self.listen = 'tcp://127.0.0.1:%d' % probe.getsockname()[1]
            self.token = os.path.join(tmp, 'token')
            with open(os.open(self.token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'w') as f:
                f.write('opencl-test-token-%d\n' % os.getpid())
            self.server = self.listen
        else:
            self.listen = 'unix:' + self.sock
            self.server = transport + ':' + self.sock
        self.proc = None

    def __enter__(self):
        cmd = [os.path.join(self.build, 'replayer', 'ternd'), '--listen', self.listen, '--backend', backend(),
               '--state-dir', os.path.join(self.tmp, 'state'), '--control', os.path.join(self.tmp, 'ctl.sock')]
        if self.token:
            cmd += ['--token-file', self.token]
        if platform_name():
            cmd += ['--opencl-platform', platform_name()]
        if loader_library():
            cmd += ['--opencl-library', loader_library()]
        # The worker sees the host platform as the direct run does.
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, 'w'), stderr=subprocess.STDOUT,
                                     env=host_env(self.tmp))
        for _ in range(200):
            if self.proc.poll() is not None:
                raise RuntimeError('ternd exited with %d at start:\n%s' % (self.proc.returncode, self.log_tail()))
            if os.path.exists(os.path.join(self.tmp, 'ctl.sock')):
                break
            time.sleep(0.05)
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def log_tail(self, n=3000):
        with open(self.log) as f:
            return f.read()[-n:]

    def sessions_served(self):
        """How many sessions ternd's workers opened (their log lines)."""
        with open(self.log, errors='replace') as f:
            return sum(1 for line in f if ': guest pid ' in line)

    def require_served(self, what):
        """Exit 1 when @what, run with env(), never reached ternd: the
        loader did not take tern's vendor folder, and the program ran on
        the host's platforms directly."""
        if not self.sessions_served():
            print('%s never reached ternd: the OpenCL loader did not use tern.icd '
                  '(OCL_ICD_VENDORS ignored?); set TERN_OPENCL_LOADER_DIR to an ocl-icd loader' % what)
            print(self.log_tail())
            sys.exit(1)

    def env(self):
        """A program's environment through this ternd: tern's platform alone."""
        env = dict(os.environ, TERN_SERVER=self.server,
                   OCL_ICD_VENDORS=vendor_folder(self.tmp, 'tern',
                                                 os.path.join(self.build, 'guest-opencl', 'libtern-opencl.so') + '\n'),
                   LD_LIBRARY_PATH=os.path.join(self.build, 'guest-shim'))
        with_loader(env)
        if self.token:
            env['TERN_TOKEN_FILE'] = self.token
        return env
