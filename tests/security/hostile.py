"""A hostile (and a well-behaved) guest for tests/security: the wire protocol
spoken directly (common/wire.h, calls.tbl), the proofs of common/auth.h
computed with Python's own hmac/hashlib (an independent implementation of
the same construction), and a ternd of the sim backend in a temporary
directory.

Everything is loopback and bounded: each helper has a timeout.
"""
import glob
import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

MAGIC = 0x314E5254
VERSION = 1              # framing
PROTOCOL = 2             # hello's protocol (WIRE_PROTOCOL)
F_REPLY, F_ERROR = 1, 2
CALL_HELLO, CALL_GOODBYE, CALL_CHALLENGE, CALL_DEVICE_GET_COUNT = 1, 2, 3, 12
CALL_HOST_FUNC_JOIN, CALL_HOST_FUNC_ATTACH = 4, 190
CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_PERMITTED = 0, 801, 800
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND = 1, 500
HEADER = struct.Struct('<IHHIIQQ')


def fail(msg):
    print('FAIL: ' + msg, file=sys.stderr)
    sys.exit(1)


def frame(call, payload=b'', seq=0, flags=0):
    return HEADER.pack(MAGIC, VERSION, flags, call, len(payload), seq, 0) + payload


def recv_exact(s, n):
    buf = b''
    while len(buf) < n:
        piece = s.recv(n - len(buf))
        if not piece:
            raise ConnectionError('closed after %d of %d bytes' % (len(buf), n))
        buf += piece
    return buf


def reply_read(s):
    magic, version, flags, call, length, seq, ctx = HEADER.unpack(recv_exact(s, HEADER.size))
    if magic != MAGIC or not flags & F_REPLY:
        raise ValueError('not a reply')
    payload = recv_exact(s, length)
    return call, struct.unpack_from('<I', payload)[0], payload[4:]


def blob(b):
    return struct.pack('<I', len(b)) + b


def mac(key, label, nonce, session):
    return hmac.new(key, label + b'\0' + nonce + session.encode(), hashlib.sha256).digest()


def token_proof(token, nonce, session):
    return mac(token, b'tern token v2', nonce, session)


def credential_proof(credential, nonce, session):
    return mac(credential, b'tern credential v2', nonce, session)


def credential_unmask(token, nonce, session, wire):
    pad = mac(token, b'tern credential mask v2', nonce, session)
    return bytes(a ^ b for a, b in zip(wire, pad))


def connect(url, timeout=5.0, source=None):
    if url.startswith('unix:'):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(url[5:])
    else:
        host, port = url[len('tcp://'):].rsplit(':', 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(timeout)
        if source:
            s.bind((source, 0))
        s.connect((host, int(port)))
    return s


class Hello:
    """The outcome of one hello: status, the socket (open when accepted),
    and the credential the reply issued."""

    def __init__(self, status, sock, credential=None, resume_seq=0, worker_pid=0):
        self.status, self.sock, self.credential = status, sock, credential
        self.resume_seq, self.worker_pid = resume_seq, worker_pid


def hello(url, session, token=None, credential=None, proof=None, last_seq=0, timeout=5.0, wait_reply=True,
          sock=None):
    """challenge, then hello with the proofs @token and @credential give
    (or the raw @proof bytes, for a forged one)."""
    s = sock or connect(url, timeout)
    s.sendall(frame(CALL_CHALLENGE))
    call, status, rest = reply_read(s)
    if call != CALL_CHALLENGE or status != CUDA_SUCCESS:
        raise ValueError('challenge refused: %d' % status)
    (n,) = struct.unpack_from('<I', rest)
    nonce = rest[4:4 + n]
    tp = token_proof(token, nonce, session) if token else b''
    cp = proof if proof is not None else (credential_proof(credential, nonce, session) if credential else b'')
    payload = (struct.pack('<I', PROTOCOL) + blob(session.encode()) + blob(tp) + struct.pack('<I', os.getpid())
               + blob(b'localhost') + struct.pack('<Q', last_seq) + blob(cp))
    s.sendall(frame(CALL_HELLO, payload))
    if not wait_reply:
        return Hello(None, s), nonce
    return hello_finish(s, url, session, token, nonce)


def hello_finish(s, url, session, token, nonce):
    call, status, rest = reply_read(s)
    if status != CUDA_SUCCESS:
        s.close()
        return Hello(status, None)
    worker_pid, base, size, quota, resume_seq, clen = struct.unpack_from('<IQQQQI', rest)
    cred = rest[struct.calcsize('<IQQQQI'):][:clen]
    if url.startswith(('tcp://', 'tls://')):
        cred = credential_unmask(token, nonce, session, cred)
    return Hello(status, s, cred, resume_seq, worker_pid)


def join(url, session, secret, raw=None, timeout=5.0):
    """A host-function connection's join (hostfn_chan.h), or @raw as its
    payload: (the reply's status, the socket, open when accepted)."""
    s = connect(url, timeout)
    payload = raw if raw is not None else blob(session.encode()) + blob(secret)
    s.sendall(frame(CALL_HOST_FUNC_JOIN, payload))
    try:
        call, status, _ = reply_read(s)
    except (ConnectionError, ValueError, OSError):
        s.close()
        return None, None
    if call != CALL_HOST_FUNC_JOIN or status != CUDA_SUCCESS:
        s.close()
        return status, None
    return status, s


def join_secret(s, seq=0):
    """host_func_attach in join mode on session socket @s: the secret."""
    s.sendall(frame(CALL_HOST_FUNC_ATTACH, struct.pack('<I', 3), seq=seq))
    call, status, rest = reply_read(s)
    if call != CALL_HOST_FUNC_ATTACH or status != CUDA_SUCCESS:
        raise ValueError('host_func_attach (join) refused: %d' % status)
    (n,) = struct.unpack_from('<I', rest, 4)
    return rest[8:8 + n]


def control_request(path, req, timeout=30):
    """One request on ternd's control socket (a dict, or raw text sent as it
    is); its final reply as a dict ({} when none came)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    s.sendall(req.encode() if isinstance(req, str) else json.dumps(req).encode() + b'\n')
    data = b''
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    lines = [json.loads(x) for x in data.decode().splitlines() if x.strip()]
    return lines[-1] if lines else {}


def alive(s, seq):
    """A call the session must still answer."""
    s.sendall(frame(CALL_DEVICE_GET_COUNT, seq=seq))
    call, status, rest = reply_read(s)
    return call == CALL_DEVICE_GET_COUNT and status == CUDA_SUCCESS


def store_packs_damage(state_dir):
    """Flip a byte in the middle of every pack of @state_dir's snapshot
    store: which pack holds a given snapshot's chunks depends on what was
    written before (chunks are shared) and by which ternd. The count."""
    packs = glob.glob(os.path.join(state_dir, 'store', '**', '*.pack'), recursive=True)
    for pack in packs:
        with open(pack, 'r+b') as f:
            f.seek(os.path.getsize(pack) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x5a]))
    return len(packs)


class Ternd:
    """A ternd of the sim backend, its sockets and state in a fresh directory."""

    def __init__(self, ternd, args=(), token=b'a-token-of-the-security-tests', umask=None, state=None,
                 tcp=True, tls=None, tls_host='127.0.0.1'):
        """@tls: certificates (tests/cuda/tls_certs.make) for one more
        listener, tls://@tls_host:PORT (self.tls), beside the tcp one;
        with tls['require_client'] ternd asks for client certificates."""
        self.dir = tempfile.mkdtemp(prefix='tern-sec-')
        os.chmod(self.dir, 0o755)
        self.state = state or os.path.join(self.dir, 'state')
        self.sock = os.path.join(self.dir, 'ternd.sock')
        self.control = os.path.join(self.dir, 'control.sock')
        self.unix = 'unix:' + self.sock
        self.token = token
        cmd = [ternd, '--backend', 'sim', '--sim-memory', '256M', '--listen', self.unix,
               '--control', self.control, '--state-dir', self.state, '--log-level', 'warn',
               '--log-file', os.path.join(self.dir, 'ternd.log')]
        if tcp:
            with socket.socket() as probe:
                probe.bind(('127.0.0.1', 0))
                self.port = probe.getsockname()[1]
            self.tcp = 'tcp://127.0.0.1:%d' % self.port
            tf = os.path.join(self.dir, 'token')
            with open(os.open(tf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'wb') as f:
                f.write(token + b'\n')
            cmd += ['--listen', self.tcp, '--token-file', tf]
        if tls:
            with socket.socket() as probe:
                probe.bind(('127.0.0.1', 0))
                self.tls_port = probe.getsockname()[1]
            self.tls = 'tls://%s:%d' % (tls_host, self.tls_port)
            cmd += ['--listen', self.tls, '--tls-cert', tls['server_cert'], '--tls-key', tls['server_key']]
            if tls.get('require_client'):
                cmd += ['--tls-ca', tls['ca']]
        cmd += list(args)
        old = os.umask(umask) if umask is not None else None
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        finally:
            if old is not None:
                os.umask(old)
        for _ in range(500):
            if os.path.exists(self.control) or self.proc.poll() is not None:
                break
            time.sleep(0.01)
        if self.proc.poll() is not None or not os.path.exists(self.control):
            fail('ternd did not start: %s' % self.proc.stderr.read().decode(errors='replace'))

    def workers(self):
        """The ternd's child processes: its session workers."""
        try:
            with open('/proc/%d/task/%d/children' % (self.proc.pid, self.proc.pid)) as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            return []

    def log(self):
        try:
            with open(os.path.join(self.dir, 'ternd.log'), errors='replace') as f:
                return f.read()
        except OSError:
            return ''

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
