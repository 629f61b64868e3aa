#!/usr/bin/env python3
"""tls:// (issue 12: TLS as libvirt uses it): a ternd with a tls:// listener
beside a plaintext tcp:// one, certificates made now by certtool, and
clients of Python's own TLS (OpenSSL, an implementation independent of
ternd's GnuTLS) and of the guest shim.

  - a TLS guest that verifies ternd's certificate gets a session and calls;
  - a plaintext guest on the tls:// listener, a TLS guest on the tcp:// one,
    a guest that trusts another CA, and one that reached ternd by an address
    the certificate does not name are each refused, and each side says why;
  - hostile handshakes: garbage instead of a ClientHello, a ClientHello cut
    short, a handshake that stops after the server's flight, connections
    that send nothing: none gets a worker, each is closed by its deadline or
    at once, one source holds no more than its share, and a good TLS guest
    still connects meanwhile;
  - with --tls-ca a client certificate is required: without one, no session.

usage: test_tls.py TERND [SHIM_DIR PROGRAM]
  (PROGRAM: a CUDA test program, run through the shim in SHIM_DIR)
"""
import atexit
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'cuda'))
import tls_certs  # noqa: E402
from hostile import (CALL_CHALLENGE, CALL_HOST_FUNC_ATTACH, CALL_HOST_FUNC_JOIN,  # noqa: E402
                     CUDA_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_SUPPORTED, CUDA_SUCCESS, F_ERROR, HEADER, Ternd,
                     alive, blob, fail, frame, hello, recv_exact, reply_read)

CALL_SHM_ATTACH = 110

DEADLINE_MS = 1500
PER_SOURCE = 8
GARBAGE = 60


def tls_wrap(port, ca, host='127.0.0.1', client=None, timeout=5.0):
    """A TLS connection to 127.0.0.1:@port that checks the server against
    @ca and @host; @client: (cert, key) to present."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if client:
        ctx.load_cert_chain(*client)
    raw = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    try:
        return ctx.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise


def closed_within(s, seconds):
    """True when the peer closes @s within @seconds (reading what comes)."""
    s.settimeout(seconds)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            if not s.recv(65536):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True
    return False


def ternd_cpu_s(pid):
    """The CPU time ternd's supervisor (not its workers) has used."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def client_hello_bytes():
    """A real ClientHello, as Python's TLS client first sends it."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname='localhost')
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def good_session(t, certs, name, host='127.0.0.1', client=None):
    s = tls_wrap(t.tls_port, certs['ca'], host=host, client=client)
    h = hello(t.tls, name, token=t.token, sock=s)
    if h.status != CUDA_SUCCESS:
        fail('%s: a TLS guest was refused (%s)' % (name, h.status))
    if not alive(h.sock, 1):
        fail('%s: the session over TLS does not answer' % name)
    return h


def expect_refused_handshake(port, ca, host, what):
    try:
        s = tls_wrap(port, ca, host=host)
    except ssl.SSLCertVerificationError as e:
        return str(e)
    except (ssl.SSLError, OSError) as e:
        fail('%s: not a certificate refusal: %r' % (what, e))
    s.close()
    fail('%s: the handshake succeeded' % what)


def shim_run(shim_dir, prog, server, env_more, tmp, name, wrap=()):
    """@prog (under the command @wrap) through the shim at @server: (exit
    status, its output, the shim's log)."""
    log = os.path.join(tmp, name + '.log')
    env = dict(os.environ, LD_LIBRARY_PATH=shim_dir, TERN_SERVER=server, TERN_LOG_FILE=log,
               TERN_LOG_LEVEL='info', TERN_RECONNECT_TIMEOUT_MS='0')
    env.update(env_more)
    r = subprocess.run(list(wrap) + [prog], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    with open(log, errors='replace') if os.path.exists(log) else open(os.devnull) as f:
        return r.returncode, r.stdout.decode(errors='replace'), f.read()


def main():
    tmp = tempfile.mkdtemp(prefix='tern-tls-')
    atexit.register(shutil.rmtree, tmp, True)
    try:
        certs = tls_certs.make(os.path.join(tmp, 'pki'))
    except tls_certs.CertError as e:
        fail(str(e))
    # Wrong certificate files stop ternd at start-up, with the reason.
    for args, want in (
            (['--tls-cert', certs['server_cert'], '--tls-key', certs['client_key']], 'do not match'),
            (['--tls-cert', certs['server_cert'], '--tls-key', os.path.join(tmp, 'nosuch.pem')], 'reading file'),
            (['--tls-cert', certs['server_cert']], 'needs --tls-cert and --tls-key'),
            (['--tls-cert', certs['server_cert'], '--tls-key', certs['server_key'], '--tls-ca', certs['server_key']],
             'TLS CA')):
        r = subprocess.run([TERND, '--listen', 'tls://127.0.0.1:1', '--state-dir', os.path.join(tmp, 'st'),
                            '--control', os.path.join(tmp, 'ctl')] + args, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        err = r.stderr.decode(errors='replace')
        if r.returncode != 2 or want not in err:
            fail('ternd %s: status %d, "%s" not said: %s' % (' '.join(args), r.returncode, want, err))
        print('ternd refused to start: %s' % err.strip().splitlines()[-1])
    token_file = None
    # On every address: 127.0.0.2 reaches it too, and the certificate names
    # only 127.0.0.1 and localhost.
    t = Ternd(TERND, tls=certs, tls_host='0.0.0.0', args=['--hello-timeout', str(DEADLINE_MS),
                                                          '--preauth-per-source', str(PER_SOURCE)])
    try:
        token_file = os.path.join(t.dir, 'token')
        # An independent TLS client gets a session, by address and by name.
        h = good_session(t, certs, 'tls-good')
        h2 = good_session(t, certs, 'tls-by-name', host='localhost')
        print('a TLS guest (OpenSSL) verified ternd and was served, by address and by name')
        # What cannot cross TLS is refused, and the session goes on.
        h.sock.sendall(frame(CALL_SHM_ATTACH, (1 << 20).to_bytes(8, 'little'), seq=2))
        call, status, _ = reply_read(h.sock)
        if call != CALL_SHM_ATTACH or status != CUDA_ERROR_NOT_SUPPORTED or not alive(h.sock, 3):
            fail('shm_attach over TLS: call %d status %d' % (call, status))
        h.sock.sendall(frame(CALL_HOST_FUNC_ATTACH, (3).to_bytes(4, 'little'), seq=4))
        call, status, _ = reply_read(h.sock)
        if call != CALL_HOST_FUNC_ATTACH or status != CUDA_ERROR_NOT_SUPPORTED:
            fail('host_func_attach in join mode over TLS: call %d status %d' % (call, status))
        j = tls_wrap(t.tls_port, certs['ca'])
        j.sendall(frame(CALL_HOST_FUNC_JOIN, blob(b'tls-good') + blob(os.urandom(32))))
        call, status, _ = reply_read(j)
        j.close()
        if call != CALL_HOST_FUNC_JOIN or status != CUDA_ERROR_NOT_SUPPORTED or not alive(h.sock, 5):
            fail('host_func_join over TLS: call %d status %d' % (call, status))
        print('shm_attach, host_func_attach in join mode and host_func_join over TLS: '
              'CUDA_ERROR_NOT_SUPPORTED, the session goes on')
        h.sock.close()
        h2.sock.close()

        # A plaintext guest on the tls:// listener hears why, in its framing.
        s = socket.create_connection(('127.0.0.1', t.tls_port), timeout=5)
        s.sendall(frame(CALL_CHALLENGE))
        magic, version, flags, call, length, seq, ctx = HEADER.unpack(recv_exact(s, HEADER.size))
        status = int.from_bytes(recv_exact(s, length)[:4], 'little')
        if call != CALL_CHALLENGE or status != CUDA_ERROR_NOT_PERMITTED or not flags & F_ERROR:
            fail('plaintext on tls://: answered call %d status %d flags %d' % (call, status, flags))
        if not closed_within(s, 2):
            fail('plaintext on tls://: the connection stayed open')
        s.close()
        print('a plaintext guest on the tls:// listener: refused (CUDA_ERROR_NOT_PERMITTED), closed')

        # A TLS guest on the plaintext listener: its handshake fails.
        try:
            tls_wrap(t.port, certs['ca']).close()
            fail('TLS on tcp://: the handshake succeeded')
        except ssl.SSLError as e:
            print('a TLS guest on the tcp:// listener: refused (%s)' % e.reason)

        # Another CA, or an address the certificate does not name.
        why = expect_refused_handshake(t.tls_port, certs['other_ca'], '127.0.0.1', 'wrong CA')
        print('a guest that trusts another CA: refused (%s)' % why)
        why = expect_refused_handshake(t.tls_port, certs['ca'], '127.0.0.2', 'wrong address')
        print('a guest that reached 127.0.0.2: refused (%s)' % why)

        # Hostile handshakes, none of which may cost a worker.
        before = set(t.workers())
        hello_bytes = client_hello_bytes()
        cases = {
            'random bytes': lambda i: os.urandom(512),
            'a record header that claims 16 KiB, and 3 bytes': lambda i: b'\x16\x03\x01\x40\x00abc',
            'a ClientHello cut in half': lambda i: hello_bytes[:len(hello_bytes) // 2],
            'a ClientHello with its body flipped': lambda i: hello_bytes[:9] + bytes(
                b ^ 0xa5 for b in hello_bytes[9:]),
            'nothing at all': lambda i: b'',
        }
        for what, make in cases.items():
            conns, start = [], time.monotonic()
            for i in range(PER_SOURCE):
                c = socket.create_connection(('127.0.0.1', t.tls_port), timeout=5)
                data = make(i)
                if data:
                    c.sendall(data)
                conns.append(c)
            if set(t.workers()) - before:
                fail('%s: a worker was forked' % what)
            closed = sum(closed_within(c, DEADLINE_MS / 1000 + 2) for c in conns)
            took = time.monotonic() - start
            for c in conns:
                c.close()
            if closed != len(conns):
                fail('%s: %d of %d connections still open after their deadline' % (what, len(conns) - closed,
                                                                                   len(conns)))
            print('%s: %d connections closed within %.1f s (deadline %d ms), no worker' % (
                what, closed, took, DEADLINE_MS))

        # Half a ClientHello and then the end of the stream: closed at once,
        # and no CPU spent on a socket that stays readable (GnuTLS may
        # report an end inside a record as "try again": unit_tls).
        cpu = ternd_cpu_s(t.proc.pid)
        conns = []
        for i in range(PER_SOURCE):
            c = socket.create_connection(('127.0.0.1', t.tls_port), timeout=5)
            c.sendall(hello_bytes[:len(hello_bytes) // 2])
            c.shutdown(socket.SHUT_WR)
            conns.append(c)
        closed = sum(closed_within(c, 0.5) for c in conns)
        for c in conns:
            c.close()
        time.sleep(DEADLINE_MS / 1000)
        cpu = ternd_cpu_s(t.proc.pid) - cpu
        if closed != len(conns) or cpu > 0.5:
            fail('half a ClientHello, then the end: %d of %d closed within 0.5 s, ternd used %.2f s of CPU'
                 % (closed, len(conns), cpu))
        print('half a ClientHello, then the end: %d connections closed at once, ternd used %.2f s of CPU'
              % (closed, cpu))

        # A whole ClientHello, then silence after the server's flight: a
        # flood of them from one source (127.0.0.3), while a good guest
        # comes in from another.
        flood = []
        for i in range(PER_SOURCE * 3):
            c = socket.create_connection(('127.0.0.1', t.tls_port), timeout=5, source_address=('127.0.0.3', 0))
            c.sendall(hello_bytes)
            flood.append(c)
        time.sleep(0.2)
        start = time.monotonic()
        h = good_session(t, certs, 'tls-during-flood')
        took = time.monotonic() - start
        h.sock.close()
        if took > 1.0:
            fail('a TLS guest took %.2f s to connect during the flood' % took)
        refused = sum(closed_within(c, 0.3) for c in flood[PER_SOURCE:])
        if len(set(t.workers()) - before) > 1:
            fail('the flood got workers')
        closed = sum(closed_within(c, DEADLINE_MS / 1000 + 2) for c in flood)
        for c in flood:
            c.close()
        if closed != len(flood):
            fail('stalled handshakes: %d of %d still open' % (len(flood) - closed, len(flood)))
        print('%d stalled handshakes from one source: %d closed at once (over %d per source), all by their '
              'deadline; a TLS guest connected in %.3f s meanwhile' % (len(flood), refused, PER_SOURCE, took))
        if refused < len(flood) - PER_SOURCE - 1:
            fail('the per-source limit did not hold for handshakes: %d of %d over it closed at once'
                 % (refused, len(flood) - PER_SOURCE))

        # A handshake done, then a hello with a wrong token: refused, no worker.
        before = set(t.workers())
        s = tls_wrap(t.tls_port, certs['ca'])
        h = hello(t.tls, 'tls-wrong-token', token=b'not-the-token-of-this-ternd', sock=s)
        if h.status != CUDA_ERROR_NOT_PERMITTED or set(t.workers()) - before:
            fail('a wrong token over TLS: status %s, new workers %s' % (h.status, set(t.workers()) - before))
        print('a wrong token inside TLS: refused (CUDA_ERROR_NOT_PERMITTED), no worker')

        # A handshake done, then no hello: the deadline still holds.
        s = tls_wrap(t.tls_port, certs['ca'])
        if not closed_within(s, DEADLINE_MS / 1000 + 2):
            fail('a TLS connection without a hello outlived its deadline')
        s.close()
        print('a TLS connection that sends no hello: closed at its deadline')

        log = t.log()
        for want in ('speaks tern\'s plaintext protocol', 'a TLS ClientHello'):
            if want not in log:
                fail('ternd\'s log does not say "%s":\n%s' % (want, log[-3000:]))

        # The guest shim itself: served, and each refusal said in its log.
        if SHIM_DIR:
            env = {'TERN_TOKEN_FILE': token_file, 'TERN_TLS_CA': certs['ca']}
            good = 'tls://127.0.0.1:%d' % t.tls_port
            rc, out, log = shim_run(SHIM_DIR, PROG, good, env, tmp, 'good')
            if rc or 'PASS' not in out or 'over TLS' not in log:
                fail('the shim over tls:// failed (%d): %s\n%s' % (rc, out, log))
            print('the shim over tls://: PASS (%s)' % [l for l in log.splitlines() if 'over TLS' in l][0]
                  .split('shim: ')[-1])
            for name, server, more, want in (
                    ('wrong-ca', good, {'TERN_TLS_CA': certs['other_ca']}, 'did not verify'),
                    ('wrong-address', 'tls://127.0.0.2:%d' % t.tls_port, {}, 'did not verify'),
                    ('plaintext-to-tls', 'tcp://127.0.0.1:%d' % t.tls_port, {}, 'wants TLS'),
                    ('tls-to-plaintext', 'tls://127.0.0.1:%d' % t.port, {}, 'plaintext')):
                e = dict(env, **more)
                rc, out, log = shim_run(SHIM_DIR, PROG, server, e, tmp, name)
                if rc == 0 or want not in log:
                    fail('the shim, %s: status %d, log lacks "%s":\n%s' % (name, rc, want, log))
                line = [l for l in log.splitlines() if want in l][0]
                print('the shim, %s: refused: %s' % (name, line.split('shim: ')[-1]))
            # Without GnuTLS: an empty file over the library, in a mount
            # namespace of the program's own (root only).
            lib = os.path.realpath('/usr/lib/x86_64-linux-gnu/libgnutls.so.30')
            wrap = ['unshare', '-m', 'sh', '-c', 'mount --bind /dev/null "$0" && exec "$@"', lib]
            if os.geteuid() == 0 and os.path.exists(lib) and shutil.which('unshare') and subprocess.run(
                    wrap + ['true'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
                rc, out, log = shim_run(SHIM_DIR, PROG, good, env, tmp, 'no-gnutls', wrap)
                if rc == 0 or 'TLS needs GnuTLS' not in log:
                    fail('the shim without GnuTLS: status %d:\n%s' % (rc, log))
                line = [l for l in log.splitlines() if 'TLS needs GnuTLS' in l][0]
                print('the shim without GnuTLS: %s' % line.split('shim: ')[-1])
            else:
                print('the shim without GnuTLS: skipped (needs root and a mount namespace)')
        if t.proc.poll() is not None:
            fail('ternd died')
    finally:
        t.stop()

    # Client certificates required (--tls-ca).
    req = dict(certs, require_client=True)
    t = Ternd(TERND, tls=req, args=['--hello-timeout', str(DEADLINE_MS)])
    try:
        try:
            s = tls_wrap(t.tls_port, certs['ca'])
            # TLS 1.3: the server's refusal comes after the client's end of the handshake.
            h = hello(t.tls, 'no-client-cert', token=t.token, sock=s)
            fail('no client certificate: a session (%s)' % h.status)
        except (ssl.SSLError, ConnectionError, OSError, ValueError) as e:
            print('no client certificate, --tls-ca given: refused (%s)' % (getattr(e, 'reason', None) or e))
        h = good_session(t, certs, 'with-client-cert', client=(certs['client_cert'], certs['client_key']))
        h.sock.close()
        print('a client certificate of the CA: served')
        if t.proc.poll() is not None:
            fail('ternd died')
    finally:
        t.stop()
    print('PASS tls')


if __name__ == '__main__':
    if len(sys.argv) not in (2, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    TERND = sys.argv[1]
    SHIM_DIR, PROG = (sys.argv[2], sys.argv[3]) if len(sys.argv) == 4 else (None, None)
    main()
