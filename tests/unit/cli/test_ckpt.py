#!/usr/bin/env python3
"""ckpt driven as a user would drive it.

    test_ckpt.py CKPT MAKE_TEST_STORE

- the usage table: every subcommand has help, unknown ones exit 2 with usage;
- --json output is one JSON object that parses, for every subcommand, on
  success and on failure;
- offline inspect / verify / rm on a store built by make_test_store with the
  real snapshot and tracker writers; verify fails after a byte of a pack is
  flipped; rm while the store is in use says to retry; rm then ls;
- ls, snapshot, suspend, resume and restore against a fake ternd answering
  canned lines on a unix socket: progress lines, answers, errors, silence,
  garbage and a dropped connection; the progress bar is drawn on a terminal
  (a pty) and never with --json.
"""
import fcntl
import json
import os
import pty
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from checks import check

CKPT, MAKE_STORE = sys.argv[1], sys.argv[2]


def run(*args, env=None, timeout=60):
    e = dict(os.environ)
    e.pop("TERN_CONTROL", None)
    e.pop("TERN_STATE_DIR", None)
    if env:
        e.update(env)
    p = subprocess.run([CKPT, *args], capture_output=True, text=True, env=e,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


def run_json(*args, **kw):
    """Run with --json; stdout must be exactly one JSON object."""
    rc, out, err = run(*args, "--json", **kw)
    try:
        obj = json.loads(out)
        one = out.count("\n") == 1 and out.endswith("\n")
    except ValueError as ex:
        obj, one = None, False
        check(False, f"--json output of {args} parses", f"{ex}\nstdout={out!r}\nstderr={err}")
    check(isinstance(obj, dict) and one, f"--json output of {args} is one object on one line", out)
    return rc, obj or {}, err


def run_pty_stderr(*args, env=None):
    """Run with stderr on a terminal; returns rc, stdout, what the terminal got."""
    e = dict(os.environ)
    e.update(env or {})
    master, slave = pty.openpty()
    p = subprocess.Popen([CKPT, *args], stdout=subprocess.PIPE, stderr=slave,
                         stdin=subprocess.DEVNULL, env=e)
    os.close(slave)
    term = b""
    while True:
        r, _, _ = select.select([master], [], [], 20)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:   # EIO once the child closed its end
            break
        if not chunk:
            break
        term += chunk
    out = p.stdout.read().decode()
    p.wait(timeout=20)
    os.close(master)
    return p.returncode, out, term.decode(errors="replace")


# --- a fake ternd ---------------------------------------------------------

class FakeTernd:
    """Answers each connection's one command line from a table of canned
    line lists; (delay, text) pairs let progress trickle in."""

    def __init__(self, path, answers):
        self.path = path
        self.answers = answers
        self.received = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        with conn:
            buf = b""
            while not buf.endswith(b"\n"):
                b = conn.recv(4096)
                if not b:
                    return
                buf += b
            cmd = request_words(json.loads(buf.decode()))
            self.received.append(cmd)
            for delay, text in self.answers.get(cmd, [line({"ok": False, "error": "unknown command"})]):
                time.sleep(delay)
                try:
                    conn.sendall(text.encode())
                except OSError:
                    return

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()
        os.unlink(self.path)


def line(obj):
    return (0, json.dumps(obj) + "\n")


def request_words(req):
    """A request (common/control_msg.h) as the words the canned answers are keyed by."""
    words = [req.pop("op")]
    for key in ("session", "snapshot"):
        if key in req:
            words.append(req.pop(key))
    if req.pop("incremental", False):
        words.append("--incremental")
    if "device" in req:
        words += ["--device", str(req.pop("device"))]
    assert not req, f"unexpected members {req}"
    return " ".join(words)


def restore_answer(**kw):
    return dict({"ok": True, "device": 0, "seq": 5, "regions": 1, "bytes": 4096}, **kw)


SNAP_ANSWER = {"ok": True, "snapshot": "sess-1-1700000000000", "parent": "snap-a", "session": "sess-1",
               "pause_ms": 12.5, "total_ms": 340.25, "regions": 3, "bytes": 4 << 30,
               "stored_bytes": 1 << 30, "chunks": 1024, "zero_chunks": 500, "unchanged_chunks": 20,
               "new_chunks": 504, "seq": 777, "hash": "cpu", "hash_ms": 1.0, "shadowed_chunks": 0,
               "direct_chunks": 1024, "drain_ms": 2.0}


def fake_answers(state_dir, store, snapshots_ok=True):
    progress = [(0.05, json.dumps({"progress": p, "stage": "copy", "bytes": int(p * 4096), "total": 4096}) + "\n")
                for p in (0.1, 0.42, 0.9)]
    a = {
        "status": [line({"ok": True, "pid": 4242, "backend": "sim", "state_dir": state_dir,
                         "sessions_started": 2, "sessions": [
            {"id": "sess-1", "pid": 5001, "state": "active", "device": 0, "memory": 256 << 20,
             "calls": 12345, "round_trips": 100, "started": 1700000000, "listener": "unix:/tmp/x"},
            {"id": "sess-2", "pid": 5002, "state": "suspended", "device": 1, "memory": 0,
             "calls": 7, "round_trips": 7, "started": 1700000001, "listener": "unix:/tmp/x"}]})],
        "snapshot sess-1 --incremental": progress + [line(SNAP_ANSWER)],
        "snapshot sess-1 mysnap": [line(dict(SNAP_ANSWER, snapshot="mysnap", parent=""))],
        "snapshot nosuch": [line({"ok": False, "error": "session 'nosuch' is not running: run `ckpt ls`"})],
        "snapshot silent": [(3, "")],
        "snapshot garbage": [(0, "this is not json\n")],
        "snapshot hangup": [],
        "snapshot noeol": [(0, json.dumps(dict(SNAP_ANSWER, snapshot="noeol")))],
        "snapshot notok": [line({"snapshot": "x"})],
        "suspend sess-1": progress + [line(dict(SNAP_ANSWER, parent=""))],
        "resume sess-1 --device 1": [line(restore_answer(session="sess-1", snapshot="sess-1-17",
                                                         pid=6001, restore_ms=41.5))],
        "resume sess-2": progress + [line(restore_answer(session="sess-2", snapshot="sess-2-3",
                                                         pid=6002, restore_ms=12.0))],
        "restore snap-a": [line(restore_answer(session="sess-1", snapshot="snap-a", pid=6003,
                                               restore_ms=99.0))],
    }
    if snapshots_ok:
        a["snapshots"] = [line({"ok": True, "store": store, "snapshots": [
            {"name": "from-ternd", "parent": "", "session": "sess-1", "created_ns": 1700000000123456789,
             "logical_bytes": 1 << 30, "stored_bytes": 1 << 20, "complete": True},
            {"name": "half", "parent": "from-ternd", "session": "sess-1", "created_ns": 0,
             "logical_bytes": 0, "stored_bytes": 0, "complete": False}]})]
    return a


# --- the usage table ------------------------------------------------------

def test_usage():
    rc, out, err = run()
    check(rc == 2 and "usage: ckpt" in err, "no subcommand: exit 2 with usage", err)
    rc, out, err = run("--help")
    check(rc == 0 and "usage: ckpt" in out, "--help: usage on stdout", out + err)
    rc, obj, _ = run_json("help")
    cmds = {c["name"]: c for c in obj.get("commands", [])}
    expected = {"ls", "snapshot", "suspend", "resume", "restore", "dump", "inspect", "verify", "rm", "migrate", "push",
                "help"}
    check(set(cmds) == expected, "the table has every subcommand", str(cmds.keys()))
    for name, c in cmds.items():
        check(len(c["help"]) > 10, f"{name} has a help line")
        check(f"  {name} " in out or f"  {name}\n" in out or out.count(f"  {name}") > 0,
              f"{name} is in the usage text")
        for form in (("help", name), (name, "--help")):
            rc, o, e = run(*form)
            check(rc == 0 and f"usage: ckpt {name}" in o and c["help"] in o,
                  f"`ckpt {' '.join(form)}` prints its usage", o + e)
    rc, out, err = run("frobnicate")
    check(rc == 2 and "unknown subcommand 'frobnicate'" in err and "usage: ckpt" in err,
          "unknown subcommand: exit 2 with usage", err)
    rc, obj, err = run_json("frobnicate")
    check(rc == 2 and obj.get("ok") is False and "frobnicate" in obj.get("error", ""),
          "unknown subcommand with --json: an error object", str(obj))
    rc, out, err = run("help", "frobnicate")
    check(rc == 2, "help of an unknown subcommand: exit 2", err)
    for args, what in ((("snapshot",), "missing argument"),
                       (("verify", "a", "b"), "extra argument"),
                       (("ls", "x"), "argument to ls"),
                       (("snapshot", "s", "--device", "1"), "--device on snapshot"),
                       (("restore", "s", "--device", "x"), "--device not a number"),
                       (("inspect", "s", "--bogus"), "unknown option"),
                       (("snapshot", "s", "--name"), "option without its value"),
                       (("snapshot", "s", "--name", "bad/name"), "invalid snapshot name"),
                       (("snapshot", "x" * 256), "session id longer than a name may be"),
                       (("rm", "ok", ".hidden"), "invalid name among rm's"),
                       (("ls", "--timeout", "0"), "bad --timeout"),
                       (("dump",), "dump without --pid and --images"),
                       (("dump", "--pid", "1"), "dump without --images"),
                       (("dump", "--images", "/tmp/x"), "dump without --pid"),
                       (("dump", "--pid", "abc", "--images", "/tmp/x"), "--pid not a number"),
                       (("dump", "--pid", "-5", "--images", "/tmp/x"), "--pid negative"),
                       (("dump", "--pid", "99999999999", "--images", "/tmp/x"), "--pid too large"),
                       (("dump", "--pid", "1", "--images"), "--images without its value"),
                       (("dump", "--pid", "1", "--images", "/tmp/x", "snap"), "an argument to dump"),
                       (("dump", "--pid", "1", "--images", "/tmp/x", "--device", "1"), "--device on dump"),
                       (("snapshot", "s", "--pid", "1"), "--pid on snapshot"),
                       (("restore", "--process"), "restore --process without --images"),
                       (("restore", "--images", "/tmp/x"), "--images without --process"),
                       (("restore", "snap", "--process", "--images", "/tmp/x"), "a snapshot and --process"),
                       (("restore", "--leave-running", "snap"), "--leave-running on restore"),
                       (("restore",), "restore with nothing"),
                       (("snapshot",), "snapshot with neither a session nor --domain"),
                       (("snapshot", "--domain"), "--domain without its value"),
                       (("snapshot", "--domain", "d", "--name", "n"), "--name with --domain"),
                       (("snapshot", "--domain", "d", "--incremental"), "--incremental with --domain"),
                       (("snapshot", "--domain", "d" * 201), "a domain name longer than libvirt's"),
                       (("snapshot", "--domain", "d", "p", "q"), "two prefixes"),
                       (("suspend", "s", "--domain", "d"), "--domain on suspend"),
                       (("ls", "--domain", "d"), "--domain on ls"),
                       (("push",), "push without a snapshot"),
                       (("push", "snap"), "push without --to"),
                       (("push", "a", "b", "--to", "tcp://h:1"), "push of two snapshots"),
                       (("push", "snap", "--to", "tcp://h:1", "--offline"), "migrate's --offline on push"),
                       (("push", "snap", "--to", "tcp://h:1", "--max-downtime", "5"), "--max-downtime on push"),
                       (("push", "bad/name", "--to", "tcp://h:1", "--token-file", "/dev/null"),
                        "push of an invalid snapshot name"),
                       (("push", "snap", "--to", "tcp://h:1", "--device", "1"), "--device on push"),
                       (("snapshot", "s", "--to", "tcp://h:1"), "--to on snapshot")):
        rc, out, err = run(*args)
        check(rc == 2 and err.strip(), f"usage error ({what}): exit 2 with a message", f"rc={rc} {err}")
    # What cannot run says why, before anything is dumped.
    rc, out, err = run("dump", "--pid", str(2 ** 22 + 12345), "--images", "/tmp/x")
    check(rc == 1 and "no process" in err, "dump of a process that is not there", err)
    rc, out, err = run("dump", "--pid", str(os.getpid()), "--images", "/tmp/x", "--criu", "/nonexistent/criu")
    check(rc == 1 and "no criu at /nonexistent/criu" in err and "tools/criu-fetch" in err,
          "dump without criu: what to do", err)
    # An images folder open to others is warned about (the images hold the
    # process's memory); /bin/false stands in for a criu that fails.
    with tempfile.TemporaryDirectory() as imgs:
        os.chmod(imgs, 0o755)
        rc, out, err = run("dump", "--pid", str(os.getpid()), "--images", imgs, "--criu", "/bin/false",
                           "--criu-plugins", "/")
        check(rc == 1 and "open to other users (mode 755)" in err and "criu dump of process" in err,
              "dump into a folder others can read: warned, then criu's failure reported", err)
    rc, out, err = run("restore", "--process", "--images", "/nonexistent/images", "--criu", "/bin/true",
                       "--criu-plugins", "/")
    check(rc == 1 and "cannot open /nonexistent/images" in err, "restore of a missing images folder", err)


# --- offline: inspect, verify, rm ----------------------------------------

def test_offline(tmp):
    store, work = os.path.join(tmp, "store"), os.path.join(tmp, "work")
    os.mkdir(work)
    p = subprocess.run([MAKE_STORE, store, work], capture_output=True, text=True)
    check(p.returncode == 0, "make_test_store builds the store", p.stderr)
    if p.returncode:
        return
    expect = json.loads(p.stdout)
    nowhere = ["--control", os.path.join(tmp, "no-ternd.sock"), "--store", store]

    # inspect, text
    rc, out, err = run(*nowhere, "inspect", "snap-a")
    check(rc == 0, "inspect snap-a succeeds", err)
    for s in ("snapshot snap-a (format 1)", "sess-1", "Sim Device",
              "GPU-01234567-89ab-cdef-0123-456789abcdef", "13.0 (13000)", "context", "module",
              "library", "kernel", "vecadd", "_Z6kernelPfi", "priority -1", "ptx", "hash ok",
              "session_id", "request 42", "0x200000000000", "total", "kind 42 is unknown"):
        check(s in out, f"inspect text shows {s!r}", out)

    # inspect, JSON: the counts make_test_store wrote
    for name in ("snap-a", "snap-b"):
        rc, obj, err = run_json(*nowhere, "inspect", name)
        check(rc == 0 and obj.get("ok") is True, f"inspect {name} --json ok", err)
        m = obj.get("manifest", {})
        check(m.get("name") == name and m.get("session") == "sess-1" and m.get("chunk_size") == 65536
              and m.get("format_version") == 1 and m.get("driver_version") == 13000,
              f"{name}: manifest decoded", str(m))
        check(m.get("parent") == ("" if name == "snap-a" else "snap-a"), f"{name}: parent", str(m))
        regions = obj.get("chunks", {}).get("regions", [])
        got = [{k: r[k] for k in ("chunks", "zero", "dedup", "unchanged", "stored")} for r in regions]
        check(got == expect[name]["regions"], f"{name}: chunk states per region", f"{got}\n{expect[name]}")
        tot = obj.get("chunks", {}).get("total", {})
        check(tot.get("logical_bytes") == (1 << 20) + (300 << 10), f"{name}: logical bytes", str(tot))
        check(tot.get("stored_bytes", 0) > 0 and tot.get("ratio", 0) > 1.0,
              f"{name}: stored bytes and ratio (zero chunks and text compress)", str(tot))
        check(sum(r["stored_bytes"] for r in regions) == tot.get("stored_bytes"),
              f"{name}: region stored bytes add up", str(regions))
        j = obj.get("journal", {})
        objs = {o["handle"]: o for o in j.get("objects", [])}
        check(len(objs) == expect["objects"], f"{name}: every object listed", str(objs.keys()))
        kinds = [o["kind"] for o in j.get("objects", [])]
        check(kinds[:7] == [1, 3, 2, 5, 4, 6, 6], f"{name}: objects in restore order", str(kinds))
        ctx = objs.get(0x0100000000000001, {})
        check(ctx.get("kind_name") == "context" and ctx.get("args") == {"device": 0, "flags": 4},
              "context args decoded", str(ctx))
        fn = objs.get(0x0400000000000001, {})
        check(fn.get("args", {}).get("name") == "_Z6kernelPfi" and fn.get("parent") == 0x0200000000000001,
              "function name and parent decoded", str(fn))
        st = objs.get(0x0600000000000001, {})
        check(st.get("args") == {"flags": 1, "priority": -1}, "stream args decoded", str(st))
        check(objs.get(0x0700000000000001, {}).get("args") == {"flags": 2}, "event args decoded")
        mod = objs.get(0x0200000000000001, {})
        images = j.get("images", [])
        check(len(images) == expect["images"] and images[0]["refs"] == expect["image_refs"]
              and images[0]["hash_ok"] and images[0]["format_name"] == "ptx",
              "image listed with refs, format and a good hash", str(images))
        check(images and mod.get("args", {}).get("image") == images[0]["hash"],
              "module args name the stored image", f"{mod}\n{images}")
        unk = objs.get(0x2a00000000000001, {})
        check(unk.get("kind_name") is None and unk.get("args_hex") == "010203",
              "unknown kind shown as hex", str(unk))
        bad = objs.get(0x0600000000000002, {})
        check("args" not in bad and bad.get("args_hex") == "ff", "malformed stream args shown as hex", str(bad))
        regs = j.get("regions", [])
        check([(r["addr"], r["size"]) for r in regs] == [(0x200000000000, 1 << 20), (0x200000200000, 300 << 10)],
              "journal regions", str(regs))
        meta = {x.get("name"): x for x in j.get("meta", [])}
        check(meta.get("session_id", {}).get("value") == "sess-1"
              and meta.get("last_reply", {}).get("seq") == 42
              and meta.get("arena_base", {}).get("value") == 0x200000000000
              and meta.get("device_uuid", {}).get("value") == "GPU-01234567-89ab-cdef-0123-456789abcdef",
              "meta decoded", str(meta))

    # not found, bad store
    rc, out, err = run(*nowhere, "inspect", "nosuch")
    check(rc == 1 and "not found in" in err and "ckpt ls" in err, "inspect of a missing snapshot", err)
    rc, obj, err = run_json(*nowhere, "verify", "nosuch")
    check(rc == 1 and obj.get("ok") is False and "not found" in obj.get("error", ""),
          "verify of a missing snapshot, --json", str(obj))
    rc, out, err = run("--store", os.path.join(tmp, "nothing-here"), "verify", "snap-a")
    check(rc == 1 and "no snapshot store at" in err and "--store" in err, "missing store named", err)
    rc, out, err = run("--state-dir", tmp, "--control", nowhere[1], "inspect", "snap-a")
    check(rc == 0 and f"in {os.path.join(tmp, 'store')}" in out, "--state-dir DIR means DIR/store", out + err)
    rc, out, err = run("--control", nowhere[1], "inspect", "snap-a", env={"TERN_STATE_DIR": tmp})
    check(rc == 0 and "snapshot snap-a" in out, "TERN_STATE_DIR names the state dir", err)

    # push: what cannot be sent says why, and nothing is sent before the
    # token and the snapshot are known good (a listener that is not ternd's
    # migration listener hangs up, or talks nonsense).
    token = os.path.join(tmp, "push-token")
    with open(token, "w") as f:
        f.write("push-token-0123456789abcdef\n")
    os.chmod(token, 0o600)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    url = "tcp://127.0.0.1:%d" % lsock.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = "tcp://127.0.0.1:%d" % closed.getsockname()[1]
    closed.close()
    rc, out, err = run("--store", store, "push", "snap-a", "--to", url, env={"TERN_TOKEN_FILE": ""})
    check(rc == 2 and "token" in err, "push without a token: usage error naming it", err)
    rc, out, err = run("--store", store, "push", "snap-a", "--to", url, "--token-file", os.path.join(tmp, "none"))
    check(rc == 2 and "none" in err, "push with a missing token file", err)
    rc, out, err = run("--store", store, "push", "nosuch", "--to", url, "--token-file", token)
    check(rc == 1 and "nosuch" in err, "push of a snapshot not in the store", err)
    rc, out, err = run("--store", store, "push", "snap-a", "--to", dead, "--token-file", token)
    check(rc == 1 and "cannot reach" in err, "push to a port nobody listens on", err)
    rc, out, err = run("--store", store, "push", "snap-a", "--to", "udp://x:1", "--token-file", token)
    check(rc == 2 and "--to takes" in err, "push to a URL of no stream kind", err)

    def nonsense():
        c, _ = lsock.accept()
        c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"\xff" * 64)
        c.close()
    th = threading.Thread(target=nonsense)
    th.start()
    rc, out, err = run("--store", store, "push", "snap-a", "--to", url, "--token-file", token)
    th.join()
    check(rc == 1 and url in err, "push to a listener that talks nonsense: refused, naming it", err)
    lsock.close()

    # verify, intact
    rc, out, err = run(*nowhere, "verify", "snap-a")
    check(rc == 0 and "intact" in out, "verify snap-a: intact", out + err)
    rc, obj, err = run_json(*nowhere, "verify", "snap-b")
    check(rc == 0 and obj.get("intact") is True and obj.get("chunks_checked", 0) > 0,
          "verify snap-b --json: intact", str(obj))

    # verify, corrupt: a copy of the store with one byte of a pack flipped
    bad_store = os.path.join(tmp, "bad-store")
    shutil.copytree(store, bad_store)
    packs = sorted(f for f in os.listdir(os.path.join(bad_store, "packs")) if f.endswith(".pack"))
    check(len(packs) >= 1, "the store has packs", str(packs))
    pack = os.path.join(bad_store, "packs", packs[0])
    with open(pack, "r+b") as f:
        f.seek(32 + 48 + 100)   # pack header, first frame header, into its bytes
        b = f.read(1)
        f.seek(32 + 48 + 100)
        f.write(bytes([b[0] ^ 0x40]))
    rc, out, err = run("--store", bad_store, "--control", nowhere[1], "verify", "snap-a")
    check(rc == 1 and "CORRUPT" in err and "snap-a" in err, "verify finds the flipped byte", out + err)
    rc, obj, err = run_json("--store", bad_store, "--control", nowhere[1], "verify", "snap-a")
    check(rc == 1 and obj.get("intact") is False and obj.get("corruption"),
          "verify --json reports the corruption", str(obj))
    rc, out, err = run("--store", bad_store, "--control", nowhere[1], "inspect", "snap-a")
    check(rc == 0, "inspect still decodes metadata of a snapshot with a bad chunk", err)

    # rm while the store is in use: a reader holds the lock shared
    with open(os.path.join(store, "lock"), "a+") as lk:
        fcntl.flock(lk, fcntl.LOCK_SH)
        rc, out, err = run(*nowhere, "rm", "snap-a", "--force")
        check(rc == 1 and "in use" in err and "retry" in err, "rm of a busy store says retry", err)
        fcntl.flock(lk, fcntl.LOCK_UN)
    rc, out, err = run(*nowhere, "rm", "nosuch")
    check(rc == 1 and "not found" in err, "rm of a missing snapshot", err)
    # A parent stays unless --force, or unless its children go too; every
    # name is checked before anything is removed.
    rc, out, err = run(*nowhere, "rm", "snap-a")
    check(rc == 1 and "parent of 'snap-b'" in err and "--force" in err and "nothing was removed" in err,
          "rm of a parent is refused without --force", err)
    rc, out, err = run(*nowhere, "rm", "snap-b", "nosuch")
    check(rc == 1 and "'nosuch' not found" in err and "nothing was removed" in err and out == "",
          "rm snap-b nosuch names the wrong one", out + err)
    rc, out, err = run(*nowhere, "verify", "snap-b")
    check(rc == 0, "rm snap-b nosuch removed nothing", out + err)

    # rm, then ls without ternd
    rc, obj, err = run_json(*nowhere, "rm", "snap-a", "--force")
    check(rc == 0 and obj.get("ok") is True and obj.get("snapshots") == [{"name": "snap-a", "removed": True}],
          "rm snap-a --json", str(obj) + err)
    rc, obj, err = run_json(*nowhere, "ls")
    names = [s["name"] for s in obj.get("snapshots", [])]
    check(rc == 0 and obj.get("ternd") is False and names == ["snap-b"] and obj.get("store") == store
          and "no ternd answers" in obj.get("note", ""),
          "ls after rm: snap-b only, from the store", str(obj))
    snap_b = obj.get("snapshots", [{}])[0]
    check(snap_b.get("parent") == "snap-a" and snap_b.get("session") == "sess-1" and snap_b.get("complete"),
          "ls shows parent, session and completeness", str(snap_b))
    rc, out, err = run(*nowhere, "ls")
    check(rc == 0 and "\n  snap-b " in out and "\n  snap-a " not in out and "not shown" in out,
          "ls text after rm", out + err)
    rc, out, err = run(*nowhere, "verify", "snap-b")
    check(rc == 0, "the child stays intact after its parent's rm", out + err)
    rc, out, err = run(*nowhere, "rm", "snap-b")
    check(rc == 0 and "freed" in out, "rm of the last snapshot frees its chunks", out + err)
    left = os.listdir(os.path.join(store, "packs"))
    check(left == [], "no pack left once every snapshot is gone", str(left))


# --- through a fake ternd ---------------------------------------------------

def test_control(tmp):
    sock = os.path.join(tmp, "control.sock")
    state = os.path.join(tmp, "state")
    store = os.path.join(state, "store")
    os.makedirs(state)
    work = os.path.join(tmp, "work2")
    os.mkdir(work)
    subprocess.run([MAKE_STORE, store, work], check=True, capture_output=True)
    fake = FakeTernd(sock, fake_answers(state, "/srv/tern/store"))
    c = ["--control", sock]
    try:
        # ls: sessions and the snapshots ternd reports
        rc, out, err = run(*c, "ls")
        check(rc == 0 and "sess-1" in out and "sess-2" in out and "suspended" in out and "12345" in out
              and "from-ternd" in out and "/srv/tern/store" in out, "ls table from ternd", out + err)
        rc, obj, err = run_json(*c, "ls")
        check(rc == 0 and obj.get("ternd") is True and len(obj.get("sessions", [])) == 2
              and obj["sessions"][0]["memory"] == 256 << 20
              and [s["name"] for s in obj.get("snapshots", [])] == ["from-ternd", "half"]
              and obj["snapshots"][0]["created_ns"] == 1700000000123456789
              and obj["snapshots"][1]["complete"] is False,
              "ls --json from ternd", str(obj))
        rc, out, err = run("ls", env={"TERN_CONTROL": sock})
        check(rc == 0 and "sess-1" in out, "TERN_CONTROL names the socket", out + err)

        # snapshot: the command sent, the result, progress only on a tty
        n = len(fake.received)
        rc, out, err = run(*c, "snapshot", "sess-1", "--incremental")
        check(fake.received[n:] == ["snapshot sess-1 --incremental"], "snapshot sends its command",
              str(fake.received[n:]))
        check(rc == 0 and "sess-1-1700000000000" in out and "12.5 ms" in out and "4.0" in out
              and "4.00x" in out and "500 zero" in out and "parent snap-a" in out,
              "snapshot result printed", out + err)
        check("\r" not in err and "%" not in err, "no progress bar when stderr is not a tty", repr(err))
        rc, out, term = run_pty_stderr(*c, "snapshot", "sess-1", "--incremental")
        check(rc == 0 and "\r" in term and "42%" in term and "copy" in term and "snapshot [" in term,
              "progress bar drawn on a terminal", repr(term))
        check(term.endswith("\r\x1b[K"), "progress bar erased at the end", repr(term[-40:]))
        check("pause" in out, "result on stdout with a terminal", out)
        rc, out, term = run_pty_stderr(*c, "snapshot", "sess-1", "--incremental", "--json")
        check(rc == 0 and term == "" and json.loads(out).get("ratio") == 4.0,
              "--json: no progress bar, the answer plus ratio", repr(term) + out)
        rc, obj, err = run_json(*c, "snapshot", "sess-1", "--incremental")
        check(obj.get("ok") is True and obj.get("seq") == 777 and obj.get("bytes") == 4 << 30,
              "snapshot --json passes ternd's fields on", str(obj))
        n = len(fake.received)
        rc, out, err = run(*c, "snapshot", "--name", "mysnap", "sess-1")
        check(rc == 0 and fake.received[n:] == ["snapshot sess-1 mysnap"] and "(full)" in out,
              "snapshot --name", str(fake.received[n:]) + out + err)

        # failures
        rc, out, err = run(*c, "snapshot", "nosuch")
        check(rc == 1 and "ternd: session 'nosuch' is not running: run `ckpt ls`" in err,
              "ternd's error is shown", err)
        rc, obj, err = run_json(*c, "snapshot", "nosuch")
        check(rc == 1 and obj.get("ok") is False and "not running" in obj.get("error", ""),
              "ternd's error with --json", str(obj))
        t0 = time.time()
        rc, out, err = run(*c, "--timeout", "1", "snapshot", "silent")
        check(rc == 1 and "sent nothing for 1 s" in err and time.time() - t0 < 2.9,
              "silence times out with advice", err)
        rc, out, err = run(*c, "snapshot", "garbage")
        check(rc == 1 and "malformed" in err, "a garbage answer is reported", err)
        rc, out, err = run(*c, "snapshot", "hangup")
        check(rc == 1 and "closed the connection" in err, "a dropped connection is reported", err)
        rc, out, err = run(*c, "snapshot", "notok")
        check(rc == 1 and "malformed" in err and "\"ok\"" in err, "an answer without ok is refused", err)
        rc, out, err = run(*c, "snapshot", "noeol")
        check(rc == 0 and "noeol" in out, "a last line without newline counts", out + err)

        # suspend, resume, restore
        rc, out, err = run(*c, "suspend", "sess-1")
        check(rc == 0 and "session sess-1 suspended into snapshot" in out and "ckpt resume sess-1" in out,
              "suspend result and hint", out + err)
        n = len(fake.received)
        rc, out, err = run(*c, "resume", "sess-1", "--device", "1")
        check(rc == 0 and fake.received[n:] == ["resume sess-1 --device 1"]
              and "resumed" in out and "6001" in out and "41.5 ms" in out, "resume --device", out + err)
        rc, out, term = run_pty_stderr(*c, "resume", "sess-2")
        check(rc == 0 and "resume [" in term and "sess-2-3" in out, "resume draws progress", repr(term) + out)
        rc, obj, err = run_json(*c, "restore", "snap-a")
        check(rc == 0 and obj.get("pid") == 6003 and obj.get("restore_ms") == 99.0, "restore --json", str(obj))
        rc, out, err = run(*c, "restore", "not a name")
        check(rc == 2, "restore of an invalid name is a usage error", err)
    finally:
        fake.close()

    # A ternd without the `snapshots` command: ls falls back to the store in
    # the state_dir status reports.
    fake = FakeTernd(sock, fake_answers(state, "", snapshots_ok=False))
    try:
        rc, obj, err = run_json(*c, "ls")
        check(rc == 0 and obj.get("ternd") is True and obj.get("store") == store
              and [s["name"] for s in obj.get("snapshots", [])] == ["snap-a", "snap-b"],
              "ls falls back to ternd's state_dir/store", str(obj) + err)
    finally:
        fake.close()

    # No ternd at all
    rc, out, err = run(*c, "snapshot", "sess-1")
    check(rc == 1 and f"no ternd answers on {sock}: start ternd, or pass --control PATH" in err,
          "no ternd: what to do", err)
    rc, obj, err = run_json(*c, "resume", "sess-1")
    check(rc == 1 and "no ternd answers" in obj.get("error", ""), "no ternd, --json", str(obj))


def main():
    with tempfile.TemporaryDirectory(prefix="ckpt-test-") as tmp:
        test_usage()
        os.mkdir(os.path.join(tmp, "offline"))
        test_offline(os.path.join(tmp, "offline"))
        os.mkdir(os.path.join(tmp, "control"))
        test_control(os.path.join(tmp, "control"))
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
