#!/usr/bin/env python3
"""Limits before authentication (issue 12, items 2 and 7's first): 300 tcp
connections that send one byte get no worker and no session slot, a guest
still connects in well under a second while they exist, they are closed at
their deadline, one source cannot hold more than its share, and idle
control clients delay nobody.

usage: test_preauth.py TERND
"""
import os
import socket
import sys
import time

from hostile import CUDA_SUCCESS, Ternd, alive, fail, hello

HALF_OPEN = 300
SOURCES = 10            # 127.0.0.2 .. 127.0.0.11: 30 connections each
DEADLINE_MS = 2000
PER_SOURCE = 64


def half_open(port, source, count):
    conns = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(5)
        s.bind((source, 0))
        s.connect(('127.0.0.1', port))
        s.sendall(b'\x54')          # the first byte of a header, and no more
        conns.append(s)
    return conns


def closed_by_peer(s, wait):
    s.settimeout(wait)
    try:
        return s.recv(1) == b''
    except socket.timeout:
        return False
    except OSError:
        return True


def timed_hello(url, session, token=None):
    start = time.monotonic()
    h = hello(url, session, token=token)
    took = time.monotonic() - start
    if h.status != CUDA_SUCCESS:
        fail('%s: hello refused (%s) while half-open connections exist' % (url, h.status))
    return h, took


def main():
    t = Ternd(TERND, args=['--hello-timeout', str(DEADLINE_MS), '--preauth-per-source', str(PER_SOURCE)])
    try:
        conns = []
        for i in range(SOURCES):
            conns += half_open(t.port, '127.0.0.%d' % (2 + i), HALF_OPEN // SOURCES)
        time.sleep(0.3)
        forked = len(t.workers())
        g1, took_unix = timed_hello(t.unix, 'guest-unix')
        g2, took_tcp = timed_hello(t.tcp, 'guest-tcp', token=t.token)
        print('preauth: %d half-open tcp connections from %d sources, %d workers forked for them; '
              'a guest connected in %.0f ms (unix) and %.0f ms (tcp)' %
              (len(conns), SOURCES, forked, took_unix * 1000, took_tcp * 1000))
        if forked:
            fail('%d workers were forked for connections that sent no hello' % forked)
        if took_unix >= 1.0 or took_tcp >= 1.0:
            fail('a guest waited a second or more')
        if not alive(g1.sock, 1) or not alive(g2.sock, 1) or len(t.workers()) != 2:
            fail('the guests\' sessions do not work (%d workers)' % len(t.workers()))
        # At the deadline every one of them is closed by ternd.
        time.sleep(DEADLINE_MS / 1000.0)
        shut = sum(closed_by_peer(s, 1.0) for s in conns)
        print('preauth: %d of %d closed by ternd at their %d ms deadline' % (shut, len(conns), DEADLINE_MS))
        if shut != len(conns):
            fail('%d half-open connections outlived their deadline' % (len(conns) - shut))
        for s in conns:
            s.close()

        # One source: it gets its share, the rest are closed at once.
        conns = half_open(t.port, '127.0.0.20', HALF_OPEN)
        time.sleep(0.3)
        shut = sum(closed_by_peer(s, 0.01) for s in conns)
        print('preauth: %d connections from one source: %d held, %d closed at accept (limit %d)' %
              (len(conns), len(conns) - shut, shut, PER_SOURCE))
        if len(conns) - shut > PER_SOURCE:
            fail('one source held more than its limit')
        g3, took = timed_hello(t.tcp, 'guest-tcp-2', token=t.token)
        print('preauth: another source\'s guest connected in %.0f ms meanwhile' % (took * 1000))
        if took >= 1.0:
            fail('a guest waited a second or more behind one source\'s flood')
        for s in conns:
            s.close()

        # Idle control clients: they cost a descriptor, never a delay.
        idle = []
        for _ in range(5):
            c = socket.socket(socket.AF_UNIX)
            c.connect(t.control)
            idle.append(c)
        g4, took = timed_hello(t.unix, 'guest-unix-2')
        print('preauth: with 5 idle control clients a guest connected in %.0f ms' % (took * 1000))
        if took >= 1.0:
            fail('idle control clients delayed a hello by %.1f s' % took)
        for c in idle:
            c.close()
        for g in (g1, g2, g3, g4):
            g.sock.close()
    finally:
        t.stop()


if __name__ == '__main__':
    TERND = sys.argv[1]
    main()
