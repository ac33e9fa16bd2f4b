"""nginx (Debian's) for the agent's tests: a reverse proxy on loopback in front of
an upstream port, plain or terminating TLS, configured in a test's temporary directory."""
import os, shutil, socket, time

import kpitest

CONF = """worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream backend {{ server 127.0.0.1:{upstream}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port}{ssl};{tls}
        location = /boom {{ return 500; }}
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""

TLS = """
        ssl_certificate {crt};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;"""


def find():
    """The nginx executable, or a Skip."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if not nginx:
        raise kpitest.Skip("nginx is not installed (make deps installs it)")
    return nginx


def start(d, port, upstream, workers=1, cert=None):
    """nginx on 127.0.0.1:port proxying to upstream, unbuffered; cert: a
    (certificate, key) pair to terminate TLS 1.2/1.3 with.  Returns the
    kpitest.Proc once the port accepts."""
    nginx = find()
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(d=d, upstream=upstream, port=port, workers=workers,
                            ssl=" ssl" if cert else "",
                            tls=TLS.format(crt=cert[0], key=cert[1]) if cert else ""))
    ng = kpitest.Proc([nginx, "-c", conf, "-g", "daemon off;"])
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return ng
        except OSError:
            assert time.monotonic() < deadline and ng.p.poll() is None, ng.drain()
            time.sleep(0.05)
