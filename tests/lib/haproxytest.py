"""haproxy (Debian's) for the agent's tests: a gateway on loopback terminating
TLS, HTTP/2 or HTTP/1.1 by ALPN, in front of an HTTP/1.1 upstream port,
configured in a test's temporary directory."""
import os, shutil

import kpitest

CONF = """global
    nbthread 1
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend gateway
    bind 127.0.0.1:{port} ssl crt {pem} alpn h2,http/1.1
    default_backend model
backend model
    server upstream 127.0.0.1:{upstream}
"""


def find():
    """The haproxy executable, or a Skip."""
    exe = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK) else None)
    if not exe:
        raise kpitest.Skip("haproxy is not installed (make deps installs it)")
    return exe


def start(d, port, upstream, cert):
    """haproxy on 127.0.0.1:port (one thread) proxying to upstream; cert: the
    (certificate, key) pair it terminates TLS with (haproxy reads them as one
    PEM).  Returns the kpitest.Proc once the port accepts."""
    exe = find()
    pem = os.path.join(d, "haproxy.pem")
    with open(pem, "w") as f:
        for p in cert:
            f.write(open(p).read())
    conf = os.path.join(d, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(CONF.format(port=port, upstream=upstream, pem=pem))
    kpitest.run([exe, "-c", "-q", "-f", conf], check=True)
    p = kpitest.Proc([exe, "-db", "-f", conf])
    kpitest.wait_accepts(port, p)
    return p
