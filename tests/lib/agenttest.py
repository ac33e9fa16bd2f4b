"""Helpers for kpi-agent's tests and benchmark: start the agent on a target,
a timed raw-socket OpenAI client (client-side TTFT/e2e on CLOCK_MONOTONIC, the
clock the agent's BPF uses), mixed load from threads, and trace checks."""
import fcntl, json, os, random, re, signal, socket, sqlite3, struct, subprocess, sys, termios, threading, time

import kpitest
import promtext

AGENT = os.path.join(kpitest.BIN, "kpi-agent")
TARGET = os.path.join(kpitest.BUILD, "tests", "agent-target")
INFER = os.path.join(kpitest.BIN, "kpi-infer")


def wait_tls(agent, n, timeout=20):
    """Until the agent has said n "TLS: pid N: ..." lines (each process whose
    libssl it probed: nginx's master and workers come at the next rescan)."""
    deadline = time.monotonic() + timeout
    while sum("TLS: pid" in l for l in agent.drain()) < n:
        assert time.monotonic() < deadline, agent.lines[-20:]
        time.sleep(0.1)


def require_built(path):
    if not os.access(path, os.X_OK):
        raise kpitest.Skip(f"{os.path.relpath(path, kpitest.ROOT)} is not built (run make)")


class Target:
    """tests/agent_target.c: an OpenAI-style stand-in that fires every kpi probe."""

    def __init__(self, *args):
        require_built(TARGET)
        self.port = kpitest.free_port()
        self.proc = kpitest.Proc([TARGET, "--port", str(self.port), *map(str, args)])
        self.proc.wait_line("listening on")
        self.pid = self.proc.pid
        self.exe = TARGET


def start_agent(db, *args, pid=None, wait=True, disable=None):
    """kpi-agent writing db; with pid it traces only that process and returns
    once it printed 'attached to pid N'.  disable: kernel features the agent
    acts as if it lacked (KPI_AGENT_DISABLE), to test its fallbacks."""
    require_built(AGENT)
    argv = [AGENT, "--db", db, *map(str, args)]
    if pid:
        argv += ["--pid", str(pid)]
    env = dict(os.environ, KPI_AGENT_DISABLE=disable) if disable else None
    a = kpitest.Proc(argv, env=env)
    if pid and wait:
        a.wait_line(f"attached to pid {pid}", timeout=60)
    return a


# Kernel socket timestamps (linux/net_tstamp.h): the client's view without
# its own scheduling delays (a Python thread can wait milliseconds for a CPU
# or the GIL between the kernel delivering a token and recv() returning).
SO_TIMESTAMPING = 37
TS_FLAGS = (1 << 1) | (1 << 3) | (1 << 4) | (1 << 11)  # TX_SOFTWARE RX_SOFTWARE SOFTWARE OPT_TSONLY


def _realtime_offset():
    """CLOCK_REALTIME - CLOCK_MONOTONIC in ns, from the tightest of a few reads."""
    best = None
    for _ in range(20):
        a = time.monotonic_ns()
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


RT_OFFSET = _realtime_offset()


def _cmsg_ts(ancdata):
    for level, typ, data in ancdata:
        if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPING and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            if sec or nsec:
                return sec * 10**9 + nsec - RT_OFFSET
    return None


class Result:
    """One request as the client saw it.  t0/t_first/t_end: CLOCK_MONOTONIC ns
    taken in the client thread (t0 before connect or send, t_first when the
    first token event was parsed); k_sent/k_first: kernel timestamps of the
    request leaving and of the response's first byte arriving (kpi-infer
    sends the headers and the first token in one send())."""
    __slots__ = ("rid", "stream", "status", "t0", "t_first", "t_end", "usage", "keepalive",
                 "error", "k_sent", "k_first")

    def __init__(self, rid, stream):
        self.rid, self.stream = rid, stream
        self.status = self.t_first = self.t_end = self.usage = self.error = None
        self.k_sent = self.k_first = None
        self.keepalive = False


class Conn:
    """One keep-alive HTTP/1.1 connection with timestamps taken as each recv()
    returns (time.monotonic_ns is CLOCK_MONOTONIC, like bpf_ktime_get_ns)."""

    def __init__(self, port):
        self.port = port
        self.sock = None
        self.buf = b""
        self.k_last = None  # kernel arrival time of the bytes last received
        self.small = False
        self.first_avail = 0

    def _recv(self):
        # TCP reports the timestamp of the last segment a recvmsg() touched:
        # a response's first read takes one byte, so it reports the segment
        # that carried the first byte even when later ones are queued behind
        data, anc, _, _ = self.sock.recvmsg(1 if self.small else 65536, 256)
        if self.small:
            # bytes already queued behind the first one: if they go past the
            # first send(), TCP may have merged later segments into its skb,
            # and the merged skb carries the latest arrival time
            n = bytearray(4)
            fcntl.ioctl(self.sock, termios.FIONREAD, n)
            self.first_avail = len(data) + struct.unpack("i", n)[0]
        self.small = False
        now = time.monotonic_ns()
        if not data:
            raise ConnectionError("server closed the connection")
        self.k_last = _cmsg_ts(anc) or now
        self.buf += data
        return now

    def _until(self, sep):
        t = None
        while sep not in self.buf:
            t = self._recv()
        i = self.buf.index(sep)
        line, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return line, t

    def _exact(self, n):
        t = None
        while len(self.buf) < n:
            t = self._recv()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out, t

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock = None
        self.buf = b""

    def completion(self, res, body, path="/v1/completions"):
        """Sends one request and fills res: status, t0 (before connect or
        send), t_first (first token event, or first response byte when not
        streamed), t_end (last byte), usage."""
        res.keepalive = self.sock is not None
        self.small = True
        res.t0 = time.monotonic_ns()
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=120)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TS_FLAGS)
            # blocking mode: with a timeout Python retries MSG_DONTWAIT reads itself
            self.sock.settimeout(None)
        data = json.dumps(body).encode()
        self.sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"x-request-id: {res.rid}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        # the request's transmit timestamp waits on the socket's error queue
        try:
            while True:
                _, anc, _, _ = self.sock.recvmsg(0, 256, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
                ts = _cmsg_ts(anc)
                if ts and res.k_sent is None:
                    res.k_sent = ts
        except BlockingIOError:
            pass
        t_head = None
        while b"\r\n\r\n" not in self.buf:
            t = self._recv()
            if t_head is None:
                t_head, res.k_first = t, self.k_last
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        res.status = int(lines[0].split()[1])
        hdr = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
        if hdr.get("x-request-id") not in (None, res.rid):
            raise AssertionError(f"x-request-id {hdr.get('x-request-id')!r} != {res.rid!r}")
        first_send = None
        if hdr.get("transfer-encoding", "").lower() == "chunked":
            events, t_evt = b"", t_head
            while True:
                size_line, t = self._until(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if first_send is None:
                    # kpi-infer sends the headers and the first event in one send()
                    first_send = len(head) + 4 + len(size_line) + 2 + size + 2
                    if self.first_avail > first_send:
                        res.k_first = None
                chunk, t2 = self._exact(size + 2)
                t_evt = t2 or t or t_evt
                if size == 0:
                    break
                events += chunk[:-2]
                while b"\n\n" in events:
                    ev, events = events.split(b"\n\n", 1)
                    for line in ev.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            continue
                        obj = json.loads(payload)
                        if obj.get("choices") and res.t_first is None:
                            res.t_first = t_evt
                        if obj.get("usage"):
                            res.usage = obj["usage"]
                        if "error" in obj:
                            res.error = obj["error"]
            res.t_end = t_evt
        else:
            n = int(hdr.get("content-length", "0"))
            payload, t = self._exact(n)
            res.t_end = t or t_head
            res.t_first = t_head
            obj = json.loads(payload) if payload else {}
            res.usage = obj.get("usage")
            res.error = obj.get("error")
        if hdr.get("connection", "").lower() == "close":
            self.close()
        return res


def completion_request(rnd, max_tokens, prompt_words):
    """A /v1/completions request of random words: (path, body)."""
    return "/v1/completions", {
        "prompt": " ".join(rnd.choice(["the", "cat", "sat", "on", "a", "mat", "of", "red", "wool"])
                           for _ in range(rnd.randint(*prompt_words))),
        "max_tokens": rnd.randint(*max_tokens), "temperature": 0}


def run_load(port, n, threads=6, seed=1, prefix="acc", max_tokens=(1, 24), keepalive=0.5,
             prompt_words=(2, 20), request=None):
    """n mixed requests (streamed or not, keep-alive or fresh connections) from
    `threads` client threads; request(i, rnd) -> (path, body) makes request i
    (default: completion_request).  Returns the list of Results."""
    if request is None:
        request = lambda i, rnd: completion_request(rnd, max_tokens, prompt_words)  # noqa: E731
    out, lock = [], threading.Lock()
    todo = list(range(n))
    sys.setswitchinterval(0.0002)   # a woken client thread gets the GIL quickly

    def worker(wid):
        rnd = random.Random(seed * 1000 + wid)
        conn = Conn(port)
        while True:
            with lock:
                if not todo:
                    break
                i = todo.pop()
            stream = rnd.random() < 0.5
            res = Result(f"{prefix}-{i:05d}", stream)
            path, body = request(i, rnd)
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            if rnd.random() >= keepalive:
                conn.close()
            try:
                conn.completion(res, body, path=path)
            except Exception as e:  # recorded, the test decides
                res.error = repr(e)
                conn.close()
            with lock:
                out.append(res)
        conn.close()

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def burst(port, n, prefix="burst", max_tokens=32, request=None):
    """n requests at once on fresh connections (to overflow --max-queue);
    request(i, rnd) -> (path, body) makes request i (default: one short
    completion)."""
    if request is None:
        request = lambda i, rnd: ("/v1/completions",  # noqa: E731
                                  {"prompt": "the cat sat on the mat", "max_tokens": max_tokens})
    out, lock = [], threading.Lock()
    go = threading.Event()

    def one(i):
        res = Result(f"{prefix}-{i:04d}", False)
        path, body = request(i, random.Random(i))
        go.wait()
        try:
            Conn(port).completion(res, body, path=path)
        except Exception as e:
            res.error = repr(e)
        with lock:
            out.append(res)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    go.set()
    for t in ts:
        t.join()
    return out


def bpf_map_keys(owner, name):
    """Keys of the BPF map called name that process owner holds open, found
    through its fds' fdinfo (map_id) and read with bpftool.  Integer keys
    come back as ints (little-endian when bpftool prints raw bytes)."""
    import subprocess
    ids = set()
    for fd in os.listdir(f"/proc/{owner}/fdinfo"):
        try:
            with open(f"/proc/{owner}/fdinfo/{fd}") as f:
                m = re.search(r"^map_id:\s*(\d+)", f.read(), re.M)
        except OSError:
            continue
        if m:
            ids.add(m.group(1))

    def bpftool(*args):
        return json.loads(subprocess.run(["bpftool", "-j", "map", *args], check=True,
                                         capture_output=True, text=True).stdout)
    for i in sorted(ids):
        if bpftool("show", "id", i).get("name") == name:
            keys = [e["key"] for e in bpftool("dump", "id", i)]
            return [k if isinstance(k, int) else int.from_bytes(bytes(int(b, 16) for b in k),
                                                                 "little") for k in keys]
    raise AssertionError(f"pid {owner} holds no BPF map named {name!r}")


def rows(db):
    c = sqlite3.connect(db)
    c.row_factory = sqlite3.Row
    try:
        return {r["request_id"]: dict(r) for r in c.execute("SELECT * FROM requests")}
    finally:
        c.close()


PHASES = ("net_in_ns", "queue_ns", "prefill_ns", "decode_ns", "net_out_ns")


def query(db, sql, *args):
    """The rows of one query on db, as dicts."""
    c = sqlite3.connect(db)
    c.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in c.execute(sql, args)]
    finally:
        c.close()


def traces(db):
    """{top-level request_id: (integration row, [hops rows of its trace])}."""
    hops = {}
    for h in query(db, "SELECT * FROM hops"):
        hops.setdefault(h["trace_id"], []).append(h)
    return {r["request_id"]: (r, hops.get(r["trace_id"], []))
            for r in query(db, "SELECT * FROM integration")}


def gateway_trace_problem(rid, trace, rules):
    """A gateway in front of kpi-infer: rid's trace ((row, hops) of traces(),
    or None) is three hops (the gateway's request, its call, kpi-infer's
    request), each below the top linked by a rule (counted in rules), its
    model hop kpi-infer's request rid.  None, or what is wrong."""
    if not trace:
        return f"{rid}: no top-level request in integration"
    row, hops = trace
    for h in hops:
        rules[h["link_rule"]] = rules.get(h["link_rule"], 0) + 1
    if sorted((h["direction"], h["depth"]) for h in hops) != [("in", 0), ("in", 2), ("out", 1)] or \
            any(h["link_rule"] is None for h in hops if h["depth"] > 0):
        return f"{rid}: hops {[(h['comm'], h['direction'], h['depth'], h['link_rule']) for h in hops]}"
    if row["model_request_id"] != rid or row["model_comm"] != "kpi-infer":
        return f"{rid}: model hop {row['model_request_id']} of {row['model_comm']}"
    return None


def pct(values, p):
    v = sorted(values)
    if not v:
        return 0
    ix = (len(v) - 1) * p / 100.0
    lo = int(ix)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (ix - lo)


def stats_us(diffs):
    """n, p50, p99, max of |diffs| (ns), in µs."""
    a = [abs(d) / 1e3 for d in diffs]
    return {"n": len(a), "p50": round(pct(a, 50), 1), "p99": round(pct(a, 99), 1),
            "max": round(max(a), 1) if a else 0}


def mono_to_wall(db):
    """The trace's CLOCK_MONOTONIC -> CLOCK_REALTIME offset, ns: an agent time
    plus it is comparable with a capture's (pcaptest)."""
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT mono_to_wall_ns FROM agent_runs").fetchone()[0]
    finally:
        c.close()


def check_accuracy(results, db_rows, ttft_p99_ms=1.0):
    """The issue's accuracy contract, request by request.  Returns a dict of
    measured numbers for the report."""
    problems = []
    diffs, kdiffs, detail = [], [], []
    for res in results:
        if res.error and res.status is None:
            problems.append(f"{res.rid}: client error {res.error}")
            continue
        r = db_rows.get(res.rid)
        if r is None:
            problems.append(f"{res.rid}: no row (status {res.status})")
            continue
        if r["http_status"] != res.status:
            problems.append(f"{res.rid}: http_status {r['http_status']} != client {res.status}")
        ph = [r[k] for k in PHASES]
        if any(v is not None and v < 0 for v in ph):
            problems.append(f"{res.rid}: negative phase {ph}")
        if sum(v for v in ph if v is not None) != r["e2e_ns"]:
            problems.append(f"{res.rid}: phases {ph} sum {sum(v for v in ph if v is not None)} != e2e {r['e2e_ns']}")
        if r["t_arrive_ns"] < res.t0:
            problems.append(f"{res.rid}: agent t_arrive {r['t_arrive_ns']} before the client sent ({res.t0})")
        if res.status == 200:
            if None in ph:
                problems.append(f"{res.rid}: a served request with a NULL phase {ph}")
            if res.usage and r["output_tokens"] != res.usage["completion_tokens"]:
                problems.append(f"{res.rid}: output_tokens {r['output_tokens']} != usage "
                                f"{res.usage['completion_tokens']}")
            if not res.usage:
                problems.append(f"{res.rid}: the client saw no usage")
            client_ttft = res.t_first - res.t0
            if r["ttft_ns"] is None:
                problems.append(f"{res.rid}: no ttft")
            else:
                if r["ttft_ns"] > client_ttft:
                    problems.append(f"{res.rid}: agent ttft {r['ttft_ns']} > client ttft {client_ttft}")
                diffs.append(client_ttft - r["ttft_ns"])
                if res.k_sent and res.k_first:
                    kdiffs.append(res.k_first - res.k_sent - r["ttft_ns"])
                    detail.append((kdiffs[-1], res.rid, res.keepalive, res.stream,
                                   r["t_arrive_ns"] - res.k_sent,
                                   res.k_first - r["t_first_write_ns"]))
        elif res.status == 429:
            if r["reject_reason"] != "queue_full" or r["queue_ns"] is not None:
                problems.append(f"{res.rid}: 429 row {r['reject_reason']} queue {r['queue_ns']}")
    # The bound is checked on the client's kernel timestamps (request sent,
    # first token received): what the client's socket saw, without the
    # milliseconds a Python thread on a busy machine can wait to be scheduled.
    # The same difference taken in the client thread is reported beside it.
    kp99 = pct(kdiffs, 99) / 1e6 if kdiffs else 0.0
    # a first segment merged with later ones has no timestamp of its own
    # (Conn._recv); those requests are left out of this bound, and counted
    if len(kdiffs) < len(diffs) * 0.5:
        problems.append(f"only {len(kdiffs)} of {len(diffs)} requests have a kernel timestamp "
                        f"of their first response byte")
    if kdiffs and kp99 > ttft_p99_ms:
        problems.append(f"(client - agent) ttft p99 {kp99:.3f} ms > {ttft_p99_ms} ms on the client's "
                        f"socket timestamps (p50 {pct(kdiffs, 50) / 1e6:.3f} ms, "
                        f"max {max(kdiffs) / 1e6:.3f} ms); worst (id, keep-alive, stream, "
                        f"t_arrive - sent us, received - t_first_write us): " +
                        ", ".join(f"({d[1]}, {d[2]}, {d[3]}, {d[4] // 1000}, {d[5] // 1000})"
                                  for d in sorted(detail, reverse=True)[:6]))
    if problems:
        raise AssertionError(f"{len(problems)} accuracy problems in {len(results)} requests:\n  "
                             + "\n  ".join(problems[:40]))
    return {"requests": len(results), "served": len(diffs),
            "rejected": sum(1 for r in results if r.status == 429),
            "socket_timestamped": len(kdiffs),
            "ttft_diff_socket_p50_ms": round(pct(kdiffs, 50) / 1e6, 4),
            "ttft_diff_socket_p99_ms": round(kp99, 4),
            "ttft_diff_socket_min_ms": round(min(kdiffs) / 1e6, 4) if kdiffs else None,
            "ttft_diff_thread_p50_ms": round(pct(diffs, 50) / 1e6, 4),
            "ttft_diff_thread_p99_ms": round(pct(diffs, 99) / 1e6, 4)}


_BUCKET = re.compile(r'^(?P<name>[^{]+)_bucket\{(?P<labels>.*)\}$')


def histogram(metrics, name):
    """{le: cumulative count}, sum and count of a Prometheus histogram."""
    buckets = {}
    for k, v in metrics.items():
        m = _BUCKET.match(k)
        if m and m.group("name") == name:
            le = re.search(r'le="([^"]+)"', m.group("labels")).group(1)
            buckets[float("inf") if le == "+Inf" else float(le)] = v
    return buckets, metrics.get(name + "_sum"), metrics.get(name + "_count")


def metrics_when(port, ready, timeout=20):
    """The agent's /metrics (parsed, promtext.by_key) once ready(it)
    holds, polled every 20 ms: the rows a sink gets may lag the trace's
    (the inferred split holds a row until the decode steps after it are
    seen, up to 2 s), so a test waits for what it counts, not a fixed time."""
    import servertest
    deadline = time.monotonic() + timeout
    while True:
        m = promtext.by_key(kpitest.http_request(port, "GET", "/metrics", timeout=5)[2].decode())
        if ready(m):
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"/metrics not ready in {timeout} s: " +
                                 ", ".join(f"{k} {v:g}" for k, v in m.items() if k.endswith("_count"))[:2000])
        time.sleep(0.02)


def series_sum(metrics, name):
    """The sum of every series of name (parsed /metrics), over all labels."""
    return sum(v for k, v in metrics.items() if k.startswith(name + "{"))


# ---- a daemon that restarts and serves at once (issue 19) -------------------

def wait_health(port, p, timeout=60):
    """Polls /health every 2 ms until it answers 200 (p: the daemon's Popen)."""
    deadline = time.monotonic() + timeout
    while True:
        if p.poll() is not None:
            raise AssertionError(f"kpi-infer exited {p.returncode} before serving")
        try:
            if kpitest.http_request(port, "GET", "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"kpi-infer did not answer /health in {timeout} s")
        time.sleep(0.002)


def require_agent_and_infer(capture=False):
    """Skips (saying why) unless this runs as root with kpi-agent and kpi-infer
    built, and, with capture, tcpdump able to capture on lo (pcaptest)."""
    kpitest.require_root("kpi-agent")
    if capture:
        import pcaptest
        pcaptest.require()
    require_built(AGENT)
    require_built(INFER)


def in_threads(items, fn, threads=4):
    """[fn(item) for item in items], threads of them at once, each thread
    taking the next item as it is free; the results in the items' order."""
    items = list(items)
    out, lock, nxt = [None] * len(items), threading.Lock(), [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(items):
                return
            out[i] = fn(items[i])
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def load_at_once(port, tag, n, threads=4):
    """n short requests from threads started together, a new connection every
    other request, half streamed; returns the Results (rid: tag-worker-i)."""
    out, lock = [], threading.Lock()

    def worker(w):
        conn = None
        for i in range(n // threads + (w < n % threads)):
            if conn is None or i % 2 == 0:
                if conn:
                    conn.close()
                conn = Conn(port)
            res = Result(f"{tag}-{w}-{i}", (w + i) % 2 == 0)
            body = {"prompt": "the cat sat on the mat", "max_tokens": 4, "temperature": 0}
            if res.stream:
                body["stream"] = True
            try:
                conn.completion(res, body)
            except Exception as e:  # the caller counts it as not served
                res.error = repr(e)
                conn.close()
                conn = None
            with lock:
                out.append(res)
        if conn:
            conn.close()

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


def restart_loop(exe, model, d, port, rounds, per_round, before_each=None):
    """rounds lifetimes of exe (a kpi-infer) on one port: started, loaded with
    per_round requests the moment /health answers (no sleep), stopped with
    SIGTERM; before_each() runs before each start.  Returns [(pid, results)]."""
    lives = []
    for r in range(rounds):
        if before_each:
            before_each()
        with open(os.path.join(d, f"infer-{r}.log"), "wb") as log:
            p = subprocess.Popen([exe, "--model", model, "--port", str(port)],
                                 stdout=log, stderr=subprocess.STDOUT)
        kpitest.on_cleanup(lambda p=p: p.poll() is None and (p.kill(), p.wait()))
        wait_health(port, p)
        lives.append((p.pid, load_at_once(port, f"r{r}-{p.pid}", per_round)))
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    return lives


def attached_lines(lines, pids):
    """pid -> the agent's 'attached to pid N ...' line for these pids, or its
    'pid N exited ... before the agent got to it' line."""
    out = {}
    for l in lines:
        m = re.match(r"attached to pid (\d+) |pid (\d+) exited .* before the agent got to it", l)
        if m and int(m.group(1) or m.group(2)) in pids:
            out[int(m.group(1) or m.group(2))] = l
    return out


def exec_latency(line):
    """(traced_ms, knew_ms) from an 'attached' line that has them, else None:
    exec -> every program follows it; exec -> the agent heard of it."""
    m = re.search(r"traced ([0-9.]+) ms after its exec \(the agent knew after ([0-9.]+) ms\)",
                  line or "")
    if m:
        return float(m.group(1)), float(m.group(2))
    # a lifetime over before the agent got to it, whose file's probes were in
    # place at its exec: traced from its exec, when the agent heard unknown
    return (0.0, None) if "traced from its exec all the same" in (line or "") else None
