#!/usr/bin/env python3
"""The token file (issue 12, item 3): ternd refuses to start on a file that
is not exactly a token (a NUL, over 255 bytes, white space at an end, CR,
two newlines, too short, readable by others, missing, a directory), with
the reason on stderr; a good file with one final newline works, and only
the exact token's proof is accepted: not a prefix, not the token with its
newline, not one byte off.

usage: test_token_file.py TERND
"""
import os
import subprocess
import sys
import tempfile

from hostile import CUDA_SUCCESS, CUDA_ERROR_NOT_PERMITTED, Ternd, fail, hello

GOOD = b'good-token-0123456789'
BAD = [
    ('a NUL after the first byte', b'\xc7\x00' + b'x' * 30, 0o600, 'NUL'),
    ('256 bytes', b'x' * 256, 0o600, 'longer than 255'),
    ('a trailing space', GOOD + b' ', 0o600, 'white space'),
    ('a trailing space and newline', GOOD + b' \n', 0o600, 'white space'),
    ('CR LF', GOOD + b'\r\n', 0o600, 'line break'),
    ('two newlines', GOOD + b'\n\n', 0o600, 'line break'),
    ('15 bytes', b'x' * 15, 0o600, 'shorter than 16'),
    ('empty', b'', 0o600, 'shorter than 16'),
    ('mode 0644', GOOD, 0o644, 'read by others'),
]


def start_fails(ternd, path, reason, name):
    d = tempfile.mkdtemp(prefix='tern-sec-tok-')
    r = subprocess.run([ternd, '--backend', 'sim', '--listen', 'unix:%s/s' % d, '--control', '%s/c' % d,
                        '--state-dir', '%s/state' % d, '--token-file', path],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    err = r.stderr.decode(errors='replace')
    if r.returncode != 2 or reason not in err:
        fail('token file with %s: ternd exited %d, said %r' % (name, r.returncode, err))
    return err.strip().splitlines()[0]


def main():
    d = tempfile.mkdtemp(prefix='tern-sec-tok-')
    refused = 0
    for name, content, mode, reason in BAD:
        path = os.path.join(d, 'token-%d' % refused)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), 'wb') as f:
            f.write(content)
        os.chmod(path, mode)
        said = start_fails(TERND, path, reason, name)
        refused += 1
        print('token file: %s: refused at start-up: %s' % (name, said))
    start_fails(TERND, os.path.join(d, 'missing'), 'cannot open', 'a missing file')
    start_fails(TERND, d, 'not a regular file', 'a directory')
    refused += 2
    print('token file: %d bad files, %d refused at start-up' % (refused, refused))

    t = Ternd(TERND, token=GOOD)      # written with one final newline
    try:
        near = [GOOD[:1], GOOD[:-1], GOOD + b'\n', GOOD[:-1] + b'X', b'\xc7', b'']
        accepted = 0
        for i, tok in enumerate(near):
            h = hello(t.tcp, 'near-%d' % i, token=tok or None)
            if h.status != CUDA_ERROR_NOT_PERMITTED:
                accepted += 1
        print('token: %d near misses (prefixes, with its newline, one byte off, none), %d accepted' %
              (len(near), accepted))
        if accepted:
            fail('a token other than the exact one was accepted')
        h = hello(t.tcp, 'exact', token=GOOD)
        if h.status != CUDA_SUCCESS:
            fail('the exact token was refused: %s' % h.status)
        h.sock.close()
        print('token: the exact token (file with one final newline) is accepted')
    finally:
        t.stop()


if __name__ == '__main__':
    TERND = sys.argv[1]
    main()
