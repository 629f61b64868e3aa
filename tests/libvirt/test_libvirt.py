#!/usr/bin/env python3
"""tern-hook and tern-libvirt against a real libvirtd and QEMU (TCG), with a
fake ternd control socket (fake_ternd.py) that records what it is asked.

    test_libvirt.py TERN_HOOK TERN_LIBVIRT

Needs root, libvirtd and qemu-system-x86_64 (else it exits 77: skipped).
The libvirtd is private: it runs in a mount namespace of its own with
/etc/libvirt (a copy, holding the hook), /run/libvirt, /var/lib/libvirt,
/var/cache/libvirt and /var/log/libvirt of its own, so neither another
libvirtd nor its domains nor the real hooks directory are touched.

A 64 MiB disk-less domain with the tern channel goes through: start
(vm-attach, generation set by the listener), save (vm-save with it; the
image's XML holds it), restore (vm-restore with it, a new generation, and
the next save paired with that one), a restore ternd refuses (libvirt
refuses it with the hook's message, the domain stays shut off, the image
restores later), an image saved without a generation (refused), the
listener started while the domain runs (generation set at start-up),
libvirtd restarted under the listener (it reconnects), ternd down at start (refused), managedsave + start, save --paused and
restore --paused, suspend/resume (nothing asked), destroy (vm-drop) and
release (nothing asked: the domain stays attached). /dev/kvm's mode is put back at the end.

Environment: TERN_LIBVIRT_KEEP=1 keeps the work folder (logs, requests) of
a failed run; TERN_LIBVIRT_LOG="1:qemu 3:*" sets libvirtd's log filters;
TERN_LIBVIRT_SETTLE=S waits S seconds (default 5) after libvirtd's restart.
"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib

HERE = os.path.dirname(os.path.abspath(__file__))
XMLNS = "https://tern.dev/xmlns/libvirt/1"
PRIVATE_DIRS = ["/run/libvirt", "/var/lib/libvirt", "/var/cache/libvirt", "/var/log/libvirt"]


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


if len(sys.argv) != 3:
    sys.exit(__doc__.strip().splitlines()[2])
HOOK, LISTENER = (os.path.abspath(a) for a in sys.argv[1:3])
if os.geteuid() != 0:
    skip("needs root (a private libvirtd)")
for tool in ("libvirtd", "virsh", "qemu-system-x86_64", "unshare"):
    if not shutil.which(tool):
        skip(tool + " not installed (tools/setup installs it)")

# Everything runs in a mount namespace of its own.
if os.environ.get("TERN_LIBVIRT_TEST_NS") != "1":
    env = dict(os.environ, TERN_LIBVIRT_TEST_NS="1")
    os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable,
                           os.path.abspath(__file__), HOOK, LISTENER], env)

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def virsh(*args, ok=True, timeout=60):
    p = subprocess.run(["virsh", "-c", "qemu:///system", "-q"] + list(args), capture_output=True,
                       text=True, timeout=timeout)
    if ok and p.returncode:
        raise RuntimeError("virsh %s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def wait_for(pred, what, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    check(False, what + " (timed out)")
    return None


class Env:
    def __init__(self, tmp):
        self.tmp = tmp
        self.control = os.path.join(tmp, "control.sock")
        self.vm_dir = os.path.join(tmp, "vm")
        self.log = os.path.join(tmp, "requests.log")
        self.answers = os.path.join(tmp, "answers.json")
        self.ternd = None
        self.listener = None
        self.libvirtd = None
        os.mkdir(self.vm_dir)
        self.answer({})

    def answer(self, errors):
        with open(self.answers, "w") as f:
            json.dump(errors, f)

    def ternd_start(self):
        self.ternd = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_ternd.py"), self.control,
                                       self.vm_dir, self.log, self.answers], stdout=subprocess.PIPE, text=True)
        assert self.ternd.stdout.readline().strip() == "ready"

    def ternd_stop(self):
        self.ternd.terminate()
        self.ternd.wait()
        os.unlink(self.control)

    def listener_start(self):
        self.listener_log = open(os.path.join(self.tmp, "listener.log"), "a")
        self.listener = subprocess.Popen([LISTENER, "--control", self.control, "--timeout", "30",
                                          "--log-level", "debug"], stderr=self.listener_log)

    def listener_stop(self):
        self.listener.terminate()
        self.listener.wait(timeout=10)
        self.listener_log.close()

    def libvirtd_restart(self):
        self.libvirtd.terminate()
        self.libvirtd.wait(timeout=30)
        libvirtd_start(self)

    def listener_connects(self):
        with open(os.path.join(self.tmp, "listener.log")) as f:
            return f.read().count("connected to qemu:///system")

    def entries(self):
        try:
            with open(self.log) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def requests(self):
        return [e["request"] for e in self.entries() if "request" in e]

    def seen(self, since, **want):
        """A request after the first @since matching every item of @want."""
        for r in self.requests()[since:]:
            if all(r.get(k) == v for k, v in want.items()):
                return r
        return None


def private_libvirtd(env):
    """Set up the namespace's libvirt directories and start its libvirtd."""
    etc = os.path.join(env.tmp, "etc")
    shutil.copytree("/etc/libvirt", etc, symlinks=True)
    shutil.rmtree(os.path.join(etc, "qemu", "networks", "autostart"), ignore_errors=True)
    for f in os.listdir(os.path.join(etc, "qemu")):
        if f.endswith(".xml"):
            os.unlink(os.path.join(etc, "qemu", f))
    with open(os.path.join(etc, "qemu.conf"), "a") as f:
        f.write('\nstdio_handler = "file"\ncgroup_controllers = [ ]\nuser = "root"\ngroup = "root"\n'
                'security_driver = "none"\n')
    with open(os.path.join(etc, "libvirtd.conf"), "a") as f:
        f.write('\nlog_outputs = "%s:file:%s/libvirtd.log"\n' % ("1" if os.environ.get("TERN_LIBVIRT_LOG") else "3", env.tmp))
        if os.environ.get("TERN_LIBVIRT_LOG"):
            f.write('log_filters = "%s"\n' % os.environ["TERN_LIBVIRT_LOG"])
    hooks = os.path.join(etc, "hooks", "qemu.d")
    os.makedirs(hooks, exist_ok=True)
    # The hook as installed would be qemu.d/tern itself; here it needs the
    # fake's control socket.
    with open(os.path.join(hooks, "tern"), "w") as f:
        f.write('#!/bin/sh\nexec %s --control %s --timeout 30 "$@"\n' % (HOOK, env.control))
    os.chmod(os.path.join(hooks, "tern"), 0o755)
    subprocess.run(["mount", "--bind", etc, "/etc/libvirt"], check=True)
    for d in PRIVATE_DIRS:
        os.makedirs(d, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", d], check=True)
    libvirtd_start(env)


def libvirtd_start(env):
    # Its own pid file: the default, /run/libvirtd.pid, is outside the
    # private directories (another libvirtd may hold it).
    env.libvirtd = subprocess.Popen(["libvirtd", "--pid-file", os.path.join(env.tmp, "libvirtd.pid")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: virsh("version", ok=False).returncode == 0, "libvirtd answers", timeout=60)


def domain_xml(name, uuid, vm_dir):
    return """<domain type='qemu'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <features><acpi/></features>
  <devices>
    <emulator>%s</emulator>
    <channel type='unix'>
      <source mode='connect' path='%s/%s.sock'><reconnect enabled='yes' timeout='1'/></source>
      <target type='virtio' name='org.tern.0'/>
    </channel>
    <memballoon model='none'/>
  </devices>
</domain>
""" % (name, uuid, shutil.which("qemu-system-x86_64"), vm_dir, uuid)


def generation_of(name):
    p = virsh("metadata", name, XMLNS, ok=False)
    if p.returncode:
        return None
    m = re.search(r"generation=['\"]([0-9a-f]+)['\"]", p.stdout)
    return m.group(1) if m else None


def image_generation(path):
    m = re.search(r"<tern:gpu [^>]*generation=['\"]([0-9a-f]+)['\"]", virsh("save-image-dumpxml", path).stdout)
    return m.group(1) if m else None


def state(name):
    return virsh("domstate", name).stdout.strip()


def scenario(env):
    name = "terntest-lv-%d" % os.getpid()
    uuid = str(uuidlib.uuid4())
    xml_path = os.path.join(env.tmp, "domain.xml")
    with open(xml_path, "w") as f:
        f.write(domain_xml(name, uuid, env.vm_dir))
    img = os.path.join(env.tmp, "d.save")
    virsh("define", xml_path)

    # start
    n = len(env.requests())
    t0 = time.time()
    virsh("start", name)
    check(env.seen(n, op="vm-attach", uuid=uuid, name=name) is not None, "start: vm-attach with uuid and name")
    gen1 = wait_for(lambda: generation_of(name), "start: the listener sets a generation")
    check(gen1 is not None and len(gen1) == 32, "start: generation is 32 hex digits (%s, %.1f s)"
          % (gen1, time.time() - t0))

    # suspend/resume: nothing asked
    n = len(env.requests())
    virsh("suspend", name)
    virsh("resume", name)
    time.sleep(1)
    check(len(env.requests()) == n, "suspend/resume: no request to ternd")

    # save
    n = len(env.requests())
    virsh("save", name, img)
    check(wait_for(lambda: env.seen(n, op="vm-save", uuid=uuid, generation=gen1), "save: vm-save") is not None,
          "save: vm-save with the domain's generation")
    check(env.seen(n, op="vm-detach", uuid=uuid) is None, "save: no vm-detach (the sessions must outlive QEMU)")
    check(image_generation(img) == gen1, "save-image-dumpxml shows the generation")
    check(state(name) == "shut off", "save: domain shut off")

    # a restore ternd refuses: libvirt refuses it, the domain stays off
    env.answer({"vm-restore": "snapshot %s/g-1 is corrupt (chunk 3)" % uuid})
    n = len(env.requests())
    p = virsh("restore", img, ok=False)
    check(p.returncode != 0 and "tern: cannot restore the GPU state of domain %s" % name in p.stderr
          and "is corrupt (chunk 3)" in p.stderr, "refused restore: libvirt shows the hook's message")
    # libvirt puts the hook's stderr at the end of its message.
    print("     virsh said: ..." + p.stderr.strip()[-160:])
    check(env.seen(n, op="vm-restore", uuid=uuid, generation=gen1, check=None) is not None,
          "refused restore: vm-restore was asked")
    check(state(name) == "shut off", "refused restore: domain stays shut off")
    env.answer({})

    # restore
    n = len(env.requests())
    virsh("restore", img)
    check(env.seen(n, op="vm-restore", uuid=uuid, generation=gen1, check=None) is not None,
          "restore: vm-restore with the image's generation (no check)")
    check(env.seen(n, op="vm-attach", uuid=uuid) is not None, "restore: vm-attach (prepare) after it")
    check(state(name) == "running", "restore: running")
    gen2 = generation_of(name)
    check(gen2 is not None and gen2 != gen1, "restore: a new generation (%s)" % gen2)

    # the next save is paired with the restored domain's own generation
    n = len(env.requests())
    virsh("save", name, img, "--paused")
    check(wait_for(lambda: env.seen(n, op="vm-save", uuid=uuid, generation=gen2), "save --paused: vm-save")
          is not None, "save --paused: vm-save with the new generation (listener read it back)")
    n = len(env.requests())
    virsh("restore", img)
    check(env.seen(n, op="vm-restore", uuid=uuid, generation=gen2) is not None, "restore of a --paused image")
    check(state(name) == "paused", "restore of a --paused image: paused")
    gen3 = generation_of(name)
    check(gen3 not in (None, gen1, gen2), "restore of a --paused image: a new generation")
    virsh("resume", name)

    # save, restore --paused
    n = len(env.requests())
    virsh("save", name, img)
    wait_for(lambda: env.seen(n, op="vm-save", uuid=uuid, generation=gen3), "save: vm-save")
    n = len(env.requests())
    virsh("restore", img, "--paused")
    check(env.seen(n, op="vm-restore", uuid=uuid, generation=gen3) is not None and state(name) == "paused",
          "restore --paused: vm-restore, paused")
    virsh("resume", name)
    gen4 = generation_of(name)

    # managedsave + start
    n = len(env.requests())
    virsh("managedsave", name)
    check(wait_for(lambda: env.seen(n, op="vm-save", uuid=uuid, generation=gen4), "managedsave: vm-save")
          is not None, "managedsave: vm-save")
    n = len(env.requests())
    virsh("start", name)
    check(env.seen(n, op="vm-restore", uuid=uuid, generation=gen4) is not None, "start after managedsave: vm-restore")
    gen5 = generation_of(name)
    check(gen5 not in (None, gen4), "start after managedsave: a new generation")

    # destroy
    n = len(env.requests())
    virsh("destroy", name)
    check(wait_for(lambda: env.seen(n, op="vm-drop", uuid=uuid), "destroy: vm-drop") is not None,
          "destroy: vm-drop")
    check(env.seen(n, op="vm-detach", uuid=uuid) is None, "destroy: no vm-detach (vm-drop frees)")

    # no listener: the image holds no generation, and its restore is refused
    env.listener_stop()
    virsh("start", name)
    time.sleep(1)
    check(generation_of(name) is None, "no listener: no generation")
    virsh("save", name, img)
    p = virsh("restore", img, ok=False)
    check(p.returncode != 0 and "this save image holds no tern GPU state" in p.stderr,
          "an image without a generation: restore refused with the reason")
    check(state(name) == "shut off", "refused restore: domain stays shut off")

    # a running domain without a generation gets one when the listener starts
    virsh("start", name)
    env.listener_start()
    check(wait_for(lambda: generation_of(name), "listener start-up: generation set") is not None,
          "listener start-up: a running domain gets a generation")

    # libvirtd restarts (the domain runs on): the listener reconnects, reads
    # the generation back, and the next save is paired with it
    gen6 = generation_of(name)
    env.libvirtd_restart()
    check(wait_for(lambda: env.listener_connects() >= 2, "libvirtd restart: the listener reconnects") is not None,
          "libvirtd restart: the listener reconnects")
    # A save in the first seconds after libvirtd's restart sends the
    # listener no events (measured: 7 of 10 runs within a second, 0 of 4 at
    # 5 s; docs/libvirt.md, "What is not covered"): this checks the
    # reconnect, not that window (TERN_LIBVIRT_SETTLE=0 checks the window).
    time.sleep(float(os.environ.get("TERN_LIBVIRT_SETTLE", "5")))
    # Here (no cgroup controllers) the new libvirtd may also fail to
    # reconnect to the QEMU and stop the domain itself, telling no one.
    if state(name) != "running":
        print("     libvirtd restart: libvirtd lost the domain (no cgroups here); save check skipped")
        virsh("start", name)
    else:
        n = len(env.requests())
        virsh("save", name, img)
        check(wait_for(lambda: env.seen(n, op="vm-save", uuid=uuid, generation=gen6),
                       "after libvirtd restart: vm-save") is not None,
              "after libvirtd restart: vm-save with the generation read back")
        virsh("restore", img)
    n = len(env.requests())
    virsh("destroy", name)
    wait_for(lambda: env.seen(n, op="vm-drop", uuid=uuid), "destroy: vm-drop")

    # ternd down: start refused with the hook's message
    env.ternd_stop()
    p = virsh("start", name, ok=False)
    check(p.returncode != 0 and "tern: cannot attach the GPU channel of domain %s: ternd is not running" % name
          in p.stderr, "ternd down: start refused with the hook's message")
    check(state(name) == "shut off", "ternd down: domain stays shut off")
    env.ternd_start()

    virsh("undefine", name)
    bad = [e for e in env.entries() if "bad" in e]
    check(not bad, "every request was well formed %s" % (bad[:3] if bad else ""))
    print("     %d requests: %s" % (len(env.requests()), " ".join(r["op"] for r in env.requests())))


def main():
    tmp = tempfile.mkdtemp(prefix="tern-libvirt-test-")
    env = Env(tmp)
    kvm = os.stat("/dev/kvm") if os.path.exists("/dev/kvm") else None
    t0 = time.time()
    try:
        if kvm:
            # Else libvirt probes QEMU again at every call (docs VM.md).
            shutil.chown("/dev/kvm", group="kvm")
            os.chmod("/dev/kvm", 0o660)
        env.ternd_start()
        private_libvirtd(env)
        env.listener_start()
        scenario(env)
    except Exception as e:  # a broken step fails the test, after clean-up
        check(False, "unexpected: %r" % e)
    finally:
        p = virsh("list", "--all", "--name", ok=False) if env.libvirtd else None
        for name in (p.stdout.split() if p and not p.returncode else []):
            virsh("destroy", name, ok=False)
            virsh("managedsave-remove", name, ok=False)
            virsh("undefine", name, ok=False)
        for proc in (env.listener, env.libvirtd, env.ternd):
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if kvm:
            os.chown("/dev/kvm", kvm.st_uid, kvm.st_gid)
            os.chmod("/dev/kvm", stat.S_IMODE(kvm.st_mode))
        if failures:
            for f in ("listener.log", "libvirtd.log"):
                path = os.path.join(tmp, f)
                if os.path.exists(path):
                    print("---- %s (last lines)" % f)
                    with open(path) as fh:
                        print("".join(fh.readlines()[-25:]))
        if failures and os.environ.get("TERN_LIBVIRT_KEEP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%s in %.1f s" % ("FAILED: " + "; ".join(failures) if failures else "PASS libvirt", time.time() - t0))
    sys.exit(1 if failures else 0)


main()
