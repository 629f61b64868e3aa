#!/usr/bin/env python3
"""Operator names through ckpt and the control socket, against a real ternd.

    test_ckpt_ternd.py CKPT TERND

Starts ternd on the sim backend in a temporary folder.  Session and snapshot
names with quotes, newlines, backslashes, other control characters and UTF-8
must come back byte for byte in ternd's answers, through `ckpt --json` and
through a raw client of the control socket (common/control_msg.h); names the
store cannot hold are refused with a reason, never mangled; and malformed
requests (NUL, overlong names, unknown members, truncated or oversized
lines) each get their error answer while ternd keeps serving.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from checks import check

CKPT, TERND = sys.argv[1], sys.argv[2]

ODD = ['quo"te', 'new\nline', 'back\\slash', 'ctl\x01\x1f\x7f\tx', 'utf-8 é ✓ 🙂', "sq'uote {}[],:",
       '"\\\n\\"', '/slash/and\\u0000text']


def ckpt_json(control, *args):
    p = subprocess.run([CKPT, "--control", control, *args, "--json"], capture_output=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    out = p.stdout.decode("utf-8")
    try:
        obj = json.loads(out)
    except ValueError as ex:
        check(False, f"ckpt {args!r} --json parses", f"{ex}: {out!r} {p.stderr!r}")
        obj = {}
    check(out.count("\n") == 1 and out.endswith("\n"), f"ckpt {args!r} --json is one line", repr(out))
    return p.returncode, obj


def raw(control, data):
    """Send bytes as a request; return every line of the answer, decoded."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(control)
    s.sendall(data)
    buf = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        buf += b
    s.close()
    return [json.loads(line) for line in buf.decode("utf-8").splitlines() if line.strip()]


def request(control, **req):
    return raw(control, json.dumps(req).encode() + b"\n")


def main():
    with tempfile.TemporaryDirectory(prefix="ckpt-ternd-") as tmp:
        control = os.path.join(tmp, "control.sock")
        proc = subprocess.Popen([TERND, "--listen", "unix:" + os.path.join(tmp, "guest.sock"),
                                 "--control", control, "--backend", "sim", "--state-dir",
                                 os.path.join(tmp, "state"), "--log-level", "warn"])
        try:
            for _ in range(500):
                if os.path.exists(control):
                    break
                time.sleep(0.02)
            check(os.path.exists(control), "ternd starts")
            run(control)
            check(proc.poll() is None, "ternd is still running after every request")
        finally:
            proc.terminate()
            rc = proc.wait(timeout=30)
        check(rc == 0, "ternd stops cleanly", str(rc))
    return check.summary()


def run(control):
    # Session names: any bytes but NUL reach ternd and come back in its answer.
    for name in ODD:
        for verb in ("snapshot", "suspend", "resume"):
            rc, obj = ckpt_json(control, verb, name)
            check(rc == 1 and obj.get("ok") is False and f"no active session '{name}'" in obj.get("error", "")
                  if verb != "resume" else
                  rc == 1 and f"'{name}' is neither a suspended session" in obj.get("error", ""),
                  f"ckpt {verb} {name!r}: the name round-trips", str(obj))
        answer = request(control, op="snapshot", session=name, snapshot="fine-name")
        check(len(answer) == 1 and answer[0].get("ok") is False
              and answer[0].get("error") == f"no active session '{name}': see `ckpt ls`",
              f"raw snapshot {name!r}: the exact name comes back", str(answer))
        # Snapshot names the store cannot hold: refused, by ckpt and by ternd.
        rc, obj = ckpt_json(control, "snapshot", "s1", "--name", name)
        check(rc == 2 and "is not a valid snapshot name" in obj.get("error", "") and name in obj["error"],
              f"ckpt refuses snapshot name {name!r}", str(obj))
        rc, obj = ckpt_json(control, "restore", name)
        check(rc == 2 and "not a valid snapshot name" in obj.get("error", ""),
              f"ckpt refuses to restore {name!r}", str(obj))
        answer = request(control, op="restore", snapshot=name)
        check(len(answer) == 1 and answer[0].get("ok") is False
              and answer[0].get("error", "").startswith(f"'{name}' is neither a suspended session nor a valid "
                                                         "snapshot name"),
              f"ternd refuses to restore {name!r}", str(answer))

    # The daemon's own answers decode.
    rc, obj = ckpt_json(control, "ls")
    check(rc == 0 and obj.get("ternd") is True and obj.get("sessions") == [] and obj.get("backend") == "sim",
          "ckpt ls --json against ternd", str(obj))
    p = subprocess.run([TERND, "status", "--control", control, "--json"], capture_output=True, text=True,
                       timeout=30)
    check(p.returncode == 0 and json.loads(p.stdout).get("ok") is True, "ternd status --json", p.stdout + p.stderr)
    answer = request(control, op="snapshots")
    check(len(answer) == 1 and answer[0].get("ok") is True and answer[0].get("snapshots") == [],
          "snapshots of an empty store", str(answer))

    # Malformed requests: one error answer each, with its reason.
    bad = [
        (b'{"op":"resume","session":"a\\u0000b"}\n', 'holds a NUL character'),
        (json.dumps({"op": "suspend", "session": "x" * 256}).encode() + b"\n", "longer than 255 bytes"),
        (b'{"op":"status","verbose":true}\n', 'unknown member "verbose"'),
        (b'{"op":"snapshot","session":"s1","device":0}\n', 'unknown member "device"'),
        (b'{"op":"snapshot"}\n', '"session" is missing'),
        (b'{"op":"resume","session":7}\n', '"session" is not a string'),
        (b'{"op":"reboot"}\n', 'unknown op "reboot"'),
        (b'{"op":"snapshot","session":"s\n', 'truncated'),
        (b'snapshot s1 name\n', 'malformed'),
        (b'{"op":"status"}{"op":"status"}\n', 'malformed'),
        (b'{"op":"resume","session":"\xff"}\n', 'utf-8'),
        (b'{"op":"status"' + b' ' * 9000 + b'}\n', 'request longer than 8192 bytes'),
    ]
    for data, why in bad:
        answer = request_raw(control, data)
        check(len(answer) == 1 and answer[0].get("ok") is False and why in answer[0].get("error", ""),
              f"bad request {data[:40]!r}: '{why}'", str(answer))


def request_raw(control, data):
    return raw(control, data)


if __name__ == "__main__":
    sys.exit(main())
