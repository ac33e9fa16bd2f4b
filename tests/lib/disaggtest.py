"""Helpers for the disaggregated kpi-infer (docs/disaggregation.md): start
prefill and decode workers and a router, send completions that return their
token ids, read and forge KV streams (abi/kpi_kv_wire.h), and a fake prefill
worker that answers whatever bytes a test gives it. Standard library only."""
import json, os, random, socket, struct, threading, time

import kpitest
import servertest as st

KV_PATH = "/v1/kv/prefill"
KV_CTYPE = "application/vnd.kpiscope.kv"
# struct kpi_kv_header, kpi_kv_layer, kpi_kv_end (abi/kpi_kv_wire.h), little-endian
HEADER = struct.Struct("<IHHQ64sIIIIIIQIIQ")
LAYER = struct.Struct("<IIIIQ")
END = struct.Struct("<IIiIQQ")
assert HEADER.size == 128 and LAYER.size == 24 and END.size == 32
HEADER_FIELDS = ("magic", "version", "header_bytes", "fingerprint", "model", "n_layers",
                 "n_kv_heads", "head_dim", "dtype", "block_size", "n_tokens", "payload_bytes",
                 "vocab_size", "reserved0", "reserved1")


def worker(role, *args, model="tiny", **kw):
    return st.Daemon("--role", role, *args, model=model, **kw)


def router(decodes, prefills=(), *args, **kw):
    a = ["--role", "router", "--decode", ",".join(d.addr for d in decodes)]
    if prefills:
        a += ["--prefill", ",".join(p.addr for p in prefills)]
    return st.Daemon(*a, *args, model=None, **kw)


def complete(port, prompt, max_tokens=8, headers=None, timeout=600, **fields):
    """A non-stream completion asking for its token ids: (status, body)."""
    body = dict(prompt=prompt, max_tokens=max_tokens, temperature=0, ignore_eos=True,
                return_token_ids=True)
    body.update(fields)
    status, h, data = kpitest.http_request(port, "POST", "/v1/completions",
                                           json.dumps(body).encode(), headers, timeout)
    return status, h, json.loads(data) if data else None


def token_ids(port, prompt, max_tokens=8, **kw):
    status, _, body = complete(port, prompt, max_tokens, **kw)
    assert status == 200, body
    return body["choices"][0]["token_ids"]


def random_prompt(rng, n):
    """n byte tokens (ids 3..258 are <0x00>..<0xFF> in the presets)."""
    return [rng.randint(3, 258) for _ in range(n)]


def load(port):
    return json.loads(kpitest.http_request(port, "GET", "/load")[2])


def kv_request(p_port, ids, fingerprint=None, seed=7, rid="kv-test"):
    """POST /v1/kv/prefill to a prefill worker: (status, headers, body bytes)."""
    h = {"x-request-id": rid}
    if fingerprint is not None:
        h["x-kpi-model"] = f"{fingerprint:016x}"
    body = json.dumps(dict(prompt=ids, max_tokens=1, temperature=0, seed=seed)).encode()
    return kpitest.http_request(p_port, "POST", KV_PATH, body, h, timeout=120)


def parse_stream(body):
    """A KV stream as (header dict, [(layer, first_pos, n_pos, payload bytes)]
    for its 2 x n_layers frames, end tuple)."""
    hdr = dict(zip(HEADER_FIELDS, HEADER.unpack_from(body, 0)))
    off, frames = HEADER.size, []
    for _ in range(2 * hdr["n_layers"]):
        magic, layer, first, n_pos, n = LAYER.unpack_from(body, off)
        off += LAYER.size
        frames.append((layer, first, n_pos, body[off:off + n]))
        off += n
    end = END.unpack_from(body, off)
    assert off + END.size == len(body), (off, len(body))
    return hdr, frames, end


def build_stream(hdr, frames, end):
    out = bytearray(HEADER.pack(*(hdr[k] for k in HEADER_FIELDS)))
    for layer, first, n_pos, payload in frames:
        out += LAYER.pack(0x594C504B, layer, first, n_pos, len(payload)) + payload
    out += END.pack(*end)
    return bytes(out)


class FakePrefill:
    """A prefill worker that answers each POST with what answer(ids, raw
    request) returns: (status line + headers + body bytes, cut) where cut (or
    None) is how many bytes to send before closing the connection. Records
    whether each connection was closed by its peer."""

    def __init__(self, answer):
        self.answer = answer
        self.peer_closed = []
        self.requests = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.got_request = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        kpitest.on_cleanup(self.close)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        self.peer_closed.append(True)
                        return
                    buf += d
                head, _, rest = buf.partition(b"\r\n\r\n")
                n = int([l.split(b":")[1] for l in head.split(b"\r\n")
                         if l.lower().startswith(b"content-length")][0])
                while len(rest) < n:
                    d = c.recv(65536)
                    if not d:
                        return
                    rest += d
                body, buf = rest[:n], rest[n:]
                self.requests += 1
                self.got_request.set()
                ans = self.answer(json.loads(body)["prompt"], head + b"\r\n\r\n" + body)
                if ans is None:  # never answer: wait for the peer to go
                    self.peer_closed.append(c.recv(1) == b"")
                    return
                data, cut = ans
                c.sendall(data if cut is None else data[:cut])
                if cut is not None:
                    return
        except OSError:
            self.peer_closed.append(True)
        finally:
            c.close()


def kv_answer(body, status=200, ctype=KV_CTYPE, length=None):
    length = len(body) if length is None else length
    return (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {length}\r\n"
            f"x-request-id: fake\r\n\r\n").encode() + body


class NetnsLink:
    """A network namespace of its own joined to this one by a veth pair, for a
    worker that the rest reach over a link tc can shape: host_ip on this side,
    peer_ip on the namespace's (a /30 of 10.213.0.0/16 chosen by pid, so
    parallel runs do not meet).  prefix is the argv that runs a command in the
    namespace; limit() puts a token bucket (tc tbf) on the namespace side's
    egress, what its worker sends.  Gone with the test (ip netns del)."""

    def __init__(self):
        kpitest.require_root("a network namespace and a veth pair")
        n = os.getpid() % 16000
        self.ns = f"kpi-pd-{os.getpid()}"
        self.host_if, self.ns_if = f"kpd{n}h", f"kpd{n}n"
        base = f"10.213.{n // 64}.{(n % 64) * 4}"
        head, last = base.rsplit(".", 1)
        self.host_ip, self.peer_ip = f"{head}.{int(last) + 1}", f"{head}.{int(last) + 2}"
        self.prefix = ("ip", "netns", "exec", self.ns)
        self._ip("netns", "add", self.ns)
        kpitest.on_cleanup(self.close)
        self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        self._ip("link", "set", self.ns_if, "netns", self.ns)
        self._ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        self._ip("link", "set", self.host_if, "up")
        self._ns("ip", "addr", "add", f"{self.peer_ip}/30", "dev", self.ns_if)
        self._ns("ip", "link", "set", self.ns_if, "up")
        self._ns("ip", "link", "set", "lo", "up")

    @staticmethod
    def _ip(*args):
        kpitest.run(["ip", *args], check=True)

    def _ns(self, *argv):
        kpitest.run([*self.prefix, *argv], check=True)

    def limit(self, rate, burst, latency="2s"):
        """What the namespace sends goes at rate (tc units: "40mbit") after a
        burst (bytes) at line rate."""
        self._ns("tc", "qdisc", "replace", "dev", self.ns_if, "root", "tbf", "rate", rate,
                 "burst", str(burst), "latency", latency)

    def unlimit(self):
        self._ns("tc", "qdisc", "del", "dev", self.ns_if, "root")

    def close(self):
        kpitest.run(["ip", "netns", "del", self.ns])
        kpitest.run(["ip", "link", "del", self.host_if])   # gone with the namespace, normally
