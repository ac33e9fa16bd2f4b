"""nginx (Debian's) for the agent's tests: a reverse proxy on loopback in front of
an upstream port, plain or terminating TLS, configured in a test's temporary directory."""
import http.client, json, os, shutil, ssl

import kpitest
import pcaptest

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
            proxy_buffering off;{headers}
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


def start(d, port, upstream, workers=1, cert=None, propagate_id=False, strip_id=False, http2=False,
          wrap=None):
    """nginx on 127.0.0.1:port proxying to upstream, unbuffered; cert: a
    (certificate, key) pair to terminate TLS 1.2/1.3 with (http2: offering h2
    by ALPN, its clients' streams proxied as HTTP/1.1); propagate_id: the
    client's x-request-id goes upstream with the request; strip_id: it does
    not (nginx passes the client's headers on unless told); wrap(argv): the
    command that runs nginx's argv (in namespaces of its own, say).  Returns
    the kpitest.Proc once the port accepts."""
    nginx = find()
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(d=d, upstream=upstream, port=port, workers=workers,
                            ssl=(" ssl http2" if http2 else " ssl") if cert else "",
                            tls=TLS.format(crt=cert[0], key=cert[1]) if cert else "",
                            headers="\n            proxy_set_header X-Request-Id $http_x_request_id;"
                            if propagate_id else '\n            proxy_set_header X-Request-Id "";'
                            if strip_id else ""))
    argv = [nginx, "-c", conf, "-g", "daemon off;"]
    ng = kpitest.Proc(wrap(argv) if wrap else argv)
    kpitest.wait_accepts(port, ng)
    return ng


def content_events(body):
    """The SSE events of a response body that carry generated content."""
    return sum(pcaptest.is_content_event(e) for e in body.replace(b"\r\n", b"\n").split(b"\n\n"))


def cert(d):
    """A self-signed certificate for 127.0.0.1: (cert, key) paths."""
    if not shutil.which("openssl"):
        raise kpitest.Skip("openssl is not installed (make deps installs it)")
    crt, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    kpitest.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt,
                 "-days", "1", "-subj", "/CN=127.0.0.1"], check=True)
    return crt, key


def client_ctx(max_version=None):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if max_version:
        ctx.maximum_version = max_version
    return ctx


class TLSClient:
    """One keep-alive TLS connection; what each request sent and got back."""

    def __init__(self, port, ctx):
        self.c = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)
        self.c.connect()
        self.cport = self.c.sock.getsockname()[1]
        self.n = 0

    def post(self, path, rid, body, headers=None):
        h = {"Content-Type": "application/json", "x-request-id": rid, **(headers or {})}
        self.c.request("POST", path, body=json.dumps(body), headers=h)
        r = self.c.getresponse()
        data = r.read()
        got = {"rid": rid, "status": r.status, "path": path, "events": content_events(data),
               "cport": self.cport, "index": self.n}
        self.n += 1
        return got
