"""Throwaway x509 certificates for the tls:// tests, made with GnuTLS's
certtool (Debian's gnutls-bin) at test time: a CA, a server certificate it
signed for 127.0.0.1 and localhost, a client certificate it signed, and a
second CA that signed nothing of these (the "wrong CA").

Files are laid out as libvirt's /etc/pki is, under one folder:
  CA/cacert.pem, CA/cakey.pem                  the CA
  tern/servercert.pem, tern/private/serverkey.pem
  tern/clientcert.pem, tern/private/clientkey.pem
  other-CA/cacert.pem                          the wrong CA
"""
import os
import shutil
import subprocess

DAYS = 2


class CertError(Exception):
    pass


def _certtool(args, template=None, folder=None):
    cmd = ['certtool'] + args
    if template is not None:
        path = os.path.join(folder, 'template.cfg')
        with open(path, 'w') as f:
            f.write(template)
        cmd += ['--template', path]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    if r.returncode:
        raise CertError('%s failed: %s' % (' '.join(cmd), r.stderr.decode(errors='replace').strip()))


def _key(path):
    # ECDSA P-256 ("high"; "medium" is P-224, which TLS does not offer): quick to make, and a handshake costs the server little.
    _certtool(['--generate-privkey', '--key-type=ecdsa', '--sec-param=high', '--outfile', path])
    os.chmod(path, 0o600)


def _ca(folder, name):
    os.makedirs(folder, exist_ok=True)
    key, cert = os.path.join(folder, 'cakey.pem'), os.path.join(folder, 'cacert.pem')
    _key(key)
    _certtool(['--generate-self-signed', '--load-privkey', key, '--outfile', cert],
              'cn = "%s"\nca\ncert_signing_key\nexpiration_days = %d\n' % (name, DAYS), folder)
    return key, cert


def make(root, server_names=('127.0.0.1', 'localhost')):
    """The certificates under @root (made if need be); a dict of paths."""
    if not shutil.which('certtool'):
        raise CertError('certtool is not installed (apt-get install gnutls-bin; tools/setup does)')
    ca_key, ca_cert = _ca(os.path.join(root, 'CA'), 'tern test CA')
    _, other_ca = _ca(os.path.join(root, 'other-CA'), 'tern test CA')   # same name, other key
    tern = os.path.join(root, 'tern')
    os.makedirs(os.path.join(tern, 'private'), exist_ok=True)
    out = {'ca': ca_cert, 'other_ca': other_ca}
    ips = [n for n in server_names if n.replace('.', '').isdigit() or ':' in n]
    dns = [n for n in server_names if n not in ips]
    for role, usage, names in (('server', 'tls_www_server', server_names), ('client', 'tls_www_client', ())):
        key = os.path.join(tern, 'private', role + 'key.pem')
        cert = os.path.join(tern, role + 'cert.pem')
        _key(key)
        template = 'cn = "tern test %s"\n%s\nsigning_key\nencryption_key\nexpiration_days = %d\n' % (
            role, usage, DAYS)
        if names:
            template += ''.join('dns_name = "%s"\n' % n for n in dns)
            template += ''.join('ip_address = "%s"\n' % n for n in ips)
        _certtool(['--generate-certificate', '--load-privkey', key, '--load-ca-certificate', ca_cert,
                   '--load-ca-privkey', ca_key, '--outfile', cert], template, tern)
        out[role + '_cert'], out[role + '_key'] = cert, key
    return out


if __name__ == '__main__':
    import sys
    if len(sys.argv) != 2:
        print('usage: tls_certs.py DIR (makes the certificates there and prints their paths)', file=sys.stderr)
        sys.exit(2)
    try:
        for k, v in sorted(make(sys.argv[1]).items()):
            print('%s %s' % (k, v))
    except CertError as e:
        print('tls_certs: %s' % e, file=sys.stderr)
        sys.exit(1)
