#!/usr/bin/env python3
"""tern-hook run as libvirt runs it, without libvirt: arguments, the domain
XML on stdin, the fake ternd of tests/libvirt on the control socket.

    test_hook_cli.py TERN_HOOK FAKE_TERND

- ops tern does not act on, and domains without the tern channel: exit 0,
  nothing asked, nothing printed;
- prepare: vm-attach; ternd down or refusing: exit 1, one "tern:" line;
  a channel that is not where ternd listens: refused with the path;
- restore: vm-restore with the image's generation (check left to ternd's false); stdout is
  the same domain with a fresh generation; no generation, or ternd
  refusing: exit 1 and nothing on stdout;
- migrate begin (the destination): vm-incoming with the metadata's
  migrate address; stdout is the domain with its channel at the path
  ternd answered; no address, ternd refusing: exit 1, nothing on stdout;
- release: nothing asked (a vm-detach there would end the sessions that
  the listener's vm-save, after it, suspends), exit 0;
- hostile stdin (over 4 MiB, a DTD, not XML): refused, nothing asked;
- bad options: exit 2 (usage) or 1 (a bad --timeout).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HOOK, FAKE = sys.argv[1], sys.argv[2]
UUID = "6f1c1c51-3d3c-4b57-9e0e-0123456789ab"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def domain(vm_dir, generation=None, channel=True, path=None, migrate=None):
    extra = " migrate='%s'" % migrate if migrate else ""
    meta = ("<metadata><tern:gpu xmlns:tern='https://tern.dev/xmlns/libvirt/1' generation='%s'%s/></metadata>"
            % (generation, extra)) if generation else ""
    chan = ("<channel type='unix'><source mode='connect' path='%s'/><target type='virtio' name='org.tern.0'/>"
            "</channel>" % (path or os.path.join(vm_dir, UUID + ".sock"))) if channel else ""
    return "<domain type='qemu'><name>vm-1</name><uuid>%s</uuid>%s<devices>%s</devices></domain>" % (
        UUID, meta, chan)


def main():
    tmp = tempfile.mkdtemp(prefix="tern-hook-cli-")
    control, vm_dir = os.path.join(tmp, "control.sock"), os.path.join(tmp, "vm")
    log, answers = os.path.join(tmp, "requests.log"), os.path.join(tmp, "answers.json")
    os.mkdir(vm_dir)
    with open(answers, "w") as f:
        f.write("{}")
    fake = subprocess.Popen([sys.executable, FAKE, control, vm_dir, log, answers], stdout=subprocess.PIPE, text=True)
    assert fake.stdout.readline().strip() == "ready"

    def hook(op, subop, stdin, *opts, sock=control):
        return subprocess.run([HOOK, "--control", sock] + list(opts) + ["vm-1", op, subop, "-"],
                              input=stdin.encode() if isinstance(stdin, str) else stdin,
                              capture_output=True, timeout=30)

    def requests():
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [json.loads(line) for line in f]

    def answer(errors):
        with open(answers, "w") as f:
            json.dump(errors, f)

    try:
        # Not tern's business.
        for op, subop in (("migrate", "end"), ("prepare", "end"), ("reconnect", "begin"), ("attach", "begin")):
            p = hook(op, subop, "not even XML")
            check(p.returncode == 0 and not p.stdout and not requests(), "%s %s: exit 0, nothing done" % (op, subop))
        p = hook("prepare", "begin", domain(vm_dir, channel=False))
        check(p.returncode == 0 and not p.stdout and not requests(), "no tern channel: exit 0, nothing asked")

        # prepare
        p = hook("prepare", "begin", domain(vm_dir))
        check(p.returncode == 0 and requests()[-1] == {"request": {"op": "vm-attach", "uuid": UUID, "name": "vm-1"}},
              "prepare: vm-attach")
        p = hook("prepare", "begin", domain(vm_dir, path="/tmp/elsewhere.sock"))
        check(p.returncode == 1 and b"must be <source mode='connect' path='%s/%s.sock'/>" % (vm_dir.encode(),
              UUID.encode()) in p.stderr, "prepare: a channel elsewhere is refused with the path")
        answer({"vm-attach": "too many domains"})
        p = hook("prepare", "begin", domain(vm_dir))
        check(p.returncode == 1 and p.stderr.decode().strip().endswith("ternd: too many domains")
              and p.stderr.startswith(b"tern: "), "prepare: ternd's refusal on one tern: line")
        answer({})
        p = hook("prepare", "begin", domain(vm_dir), sock=os.path.join(tmp, "none.sock"))
        check(p.returncode == 1 and b"ternd is not running" in p.stderr, "prepare: ternd down")

        # restore
        n = len(requests())
        p = hook("restore", "begin", domain(vm_dir, generation="00ff"))
        out = p.stdout.decode()
        m = re.search(r'generation="([0-9a-f]+)"', out)
        check(p.returncode == 0 and requests()[n:] == [{"request": {"op": "vm-restore", "uuid": UUID,
                                                                    "generation": "00ff"}}],
              "restore: vm-restore with the image's generation, check false")
        check(m is not None and len(m.group(1)) == 32 and UUID in out and "org.tern.0" in out,
              "restore: stdout is the domain with a fresh generation")
        p = hook("restore", "begin", domain(vm_dir))
        check(p.returncode == 1 and not p.stdout and b"holds no tern GPU state" in p.stderr,
              "restore: no generation in the image")
        answer({"vm-restore": "snapshot x is corrupt"})
        p = hook("restore", "begin", domain(vm_dir, generation="00ff"))
        check(p.returncode == 1 and not p.stdout and b"snapshot x is corrupt" in p.stderr, "restore: ternd refuses")
        answer({})

        # migrate begin, on the destination
        n = len(requests())
        src = "tcp://192.0.2.7:7700"
        p = hook("migrate", "begin", domain(vm_dir, generation="00ff", path="/run/elsewhere/x.sock", migrate=src))
        out = p.stdout.decode()
        check(p.returncode == 0 and requests()[n:] == [{"request": {"op": "vm-incoming", "uuid": UUID,
                                                                    "name": "vm-1", "url": src}}],
              "migrate: vm-incoming with the metadata's address")
        check("path=\"%s/%s.sock\"" % (vm_dir, UUID) in out and "elsewhere" not in out and 'mode="connect"' in out
              and 'generation="00ff"' in out, "migrate: stdout is the domain with its channel where ternd listens")
        n = len(requests())
        p = hook("migrate", "begin", domain(vm_dir, generation="00ff"))
        check(p.returncode == 1 and not p.stdout and b"names no ternd" in p.stderr and len(requests()) == n,
              "migrate: no migrate address in the metadata is refused, nothing asked")
        for bad in ("ftp://x", "tcp://a b", "tcp://a'b"):
            p = hook("migrate", "begin", domain(vm_dir, generation="00ff", migrate=bad).replace("'" + bad + "'",
                                                                                                '"%s"' % bad))
            check(p.returncode == 1 and not p.stdout and b"migrate address" in p.stderr,
                  "migrate: a migrate address %r is refused" % bad)
        answer({"vm-incoming": "the GPU is full"})
        p = hook("migrate", "begin", domain(vm_dir, generation="00ff", migrate=src))
        check(p.returncode == 1 and not p.stdout and p.stderr.decode().strip().endswith("ternd: the GPU is full"),
              "migrate: ternd's refusal aborts it")
        answer({})

        # release
        n = len(requests())
        p = hook("release", "end", domain(vm_dir))
        check(p.returncode == 0 and len(requests()) == n, "release: nothing asked of ternd")

        # hostile stdin
        n = len(requests())
        for what, data in (("over 4 MiB", b"<domain>" + b" " * (4 << 20) + b"</domain>"),
                           ("a DTD", "<!DOCTYPE domain [<!ENTITY a 'b'>]>" + domain(vm_dir)),
                           ("not XML", b"\x00\xff garbage"),
                           ("two channels", domain(vm_dir).replace("</devices>", "<channel type='unix'>"
                                                                   "<target type='virtio' name='org.tern.0'/>"
                                                                   "</channel></devices>"))):
            p = hook("prepare", "begin", data)
            check(p.returncode == 1 and p.stderr.startswith(b"tern: ") and p.stderr.count(b"\n") == 1,
                  "hostile stdin (%s): refused with one line" % what)
        check(len(requests()) == n, "hostile stdin: nothing asked")

        # options
        p = subprocess.run([HOOK, "vm-1", "prepare"], capture_output=True, input=b"")
        check(p.returncode == 2 and b"usage" in p.stderr, "too few arguments: usage")
        p = subprocess.run([HOOK, "--nosuch", "vm-1", "prepare", "begin", "-"], capture_output=True, input=b"")
        check(p.returncode == 2, "unknown option: usage")
        p = subprocess.run([HOOK, "--timeout", "0", "vm-1", "prepare", "begin", "-"], capture_output=True, input=b"")
        check(p.returncode == 1 and b"--timeout" in p.stderr, "bad --timeout refused")
        bad = [e for e in requests() if "bad" in e]
        check(not bad, "every request well formed %s" % bad[:2])
    finally:
        fake.terminate()
        fake.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: " + "; ".join(failures) if failures else "PASS hook_cli")
    sys.exit(1 if failures else 0)


main()
