#!/usr/bin/env python3
"""A stand-in for ternd's control socket as the libvirt hook and listener
see it (docs/libvirt.md): the hook's tests need no ternd.

    fake_ternd.py CONTROL_SOCKET VM_DIR LOG ANSWERS

Every request is checked strictly (exact members per op, uuid, name and
generation forms, one line) and appended to LOG as one JSON line:
{"request": {...}} when it is well formed, {"bad": "reason", "line": "..."}
when not (the test fails on any). The answer is ternd's vm result, {"ok":true,"uuid":U,"snapshots":[]} (vm-attach adds
"path": VM_DIR/UUID.sock, where it then listens (vm-incoming too), as ternd would, so that
libvirt finds the socket and QEMU connects; vm-detach removes it), or {"ok":false,"error":E} when
the JSON object in the file ANSWERS, read at each request, maps the op to E.
"""
import json
import os
import re
import socket
import sys
import threading

CONTROL, VM_DIR, LOG, ANSWERS = sys.argv[1:5]

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
GENERATION = re.compile(r"[0-9a-f]{1,64}\Z")
NAME = re.compile(r"[\x20-\x2e\x30-\x7e]{1,200}\Z")
MIGRATE_URL = re.compile(r"(tcp://|unix:)[\x21-\x7e]{1,250}\Z")

# op -> the members it takes (besides "op"), each with its check; those in
# OPTIONAL may be left out (ternd's default: false).
OPTIONAL = {"check"}
OPS = {
    "vm-attach": {"uuid": UUID.match, "name": NAME.match},
    "vm-detach": {"uuid": UUID.match},
    "vm-save": {"uuid": UUID.match, "generation": GENERATION.match},
    "vm-restore": {"uuid": UUID.match, "generation": GENERATION.match,
                   "check": lambda v: v is False or v is True},
    "vm-drop": {"uuid": UUID.match},
    "vm-incoming": {"uuid": UUID.match, "name": NAME.match, "url": MIGRATE_URL.match},
    "vm-switch": {"uuid": UUID.match, "generation": GENERATION.match},
}

log_lock = threading.Lock()
channels_lock = threading.Lock()
channels = {}  # uuid -> listening socket for QEMU


def log(entry):
    with log_lock, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


def check(line):
    """The request, or raise ValueError with the reason."""
    try:
        req = json.loads(line)
    except ValueError:
        raise ValueError("not JSON")
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        raise ValueError("not an object with an op")
    members = OPS.get(req["op"])
    if members is None:
        raise ValueError("unknown op")
    if not set(members) - OPTIONAL <= set(req) - {"op"} <= set(members):
        raise ValueError("members %s, want %s" % (sorted(req), sorted(members)))
    for key, ok in members.items():
        if key not in req:
            continue
        value = req[key]
        if key != "check" and not isinstance(value, str):
            raise ValueError("%s is not a string" % key)
        if not ok(value):
            raise ValueError("bad %s" % key)
    return req


def drain(sock):
    """Accept QEMU's connections and read what the guest writes."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        threading.Thread(target=lambda c=conn: [None for _ in iter(lambda: c.recv(65536), b"")],
                         daemon=True).start()


def channel_listen(uuid):
    path = os.path.join(VM_DIR, uuid + ".sock")
    if uuid not in channels:
        if os.path.exists(path):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o660)
        s.listen(4)
        channels[uuid] = s
        threading.Thread(target=drain, args=(s,), daemon=True).start()
    return path


def channel_close(uuid):
    """As ternd's vm-detach: the socket is gone (libvirt's release)."""
    s = channels.pop(uuid, None)
    if s:
        s.close()
        os.unlink(os.path.join(VM_DIR, uuid + ".sock"))


def answer(req):
    try:
        with open(ANSWERS) as f:
            errors = json.load(f)
    except (OSError, ValueError):
        errors = {}
    if req["op"] in errors:
        return {"ok": False, "error": errors[req["op"]]}
    # ternd's reply to a vm-* op (common/control_msg.c's vm result).
    reply = {"ok": True, "uuid": req["uuid"], "snapshots": []}
    if req["op"] in ("vm-attach", "vm-incoming"):
        reply["path"] = channel_listen(req["uuid"])
    elif req["op"] == "vm-detach":
        channel_close(req["uuid"])
    return reply


def serve(conn):
    with conn:
        data = b""
        conn.settimeout(10)
        try:
            while b"\n" not in data and len(data) < 8192:
                chunk = conn.recv(8192)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        line, sep, rest = data.partition(b"\n")
        try:
            if not sep or rest:
                raise ValueError("not exactly one line")
            req = check(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            log({"bad": str(e), "line": data.decode("utf-8", "replace")})
            conn.sendall(b'{"ok":false,"error":"malformed request"}\n')
            return
        log({"request": req})
        with channels_lock:
            reply = answer(req)
        conn.sendall((json.dumps(reply) + "\n").encode())


def main():
    if os.path.exists(CONTROL):
        os.unlink(CONTROL)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(CONTROL)
    s.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


main()
