"""Helpers for kpi-agent's fault and least-privilege tests (issue 11): a
kpi-infer that can be SIGKILLed and restarted under a private executable name
(so the agent's --exe matches only the test's daemons), continuous load from
client threads that follows the daemon across restarts, a small tmpfs to fill,
and the bookkeeping of what the client saw complete versus what the trace holds."""
import os, shutil, signal, sqlite3, subprocess, threading, time

import kpitest
import agenttest
import servertest

# make soak sets KPI_SOAK=1: the long versions (more restarts, longer load)
SOAK = os.environ.get("KPI_SOAK") == "1"
REPORT = os.path.join(kpitest.BUILD, "reliability", "agent_faults.json")


def require():
    kpitest.require_root("kpi-agent's fault tests")
    agenttest.require_built(agenttest.AGENT)
    servertest.require_binary()


def workdir():
    d = kpitest.tmpdir("kpi-faults-")
    os.chmod(d, 0o755)  # an unprivileged agent must reach its DB directory below
    return d


def private_infer(d):
    """A copy of build/kpi-infer under a name only this test uses."""
    exe = os.path.join(d, "kpi-infer-faults")
    shutil.copy2(servertest.KPI_INFER, exe)
    return exe


class Infer:
    """One lifetime of kpi-infer (tiny model) on a fresh port."""

    def __init__(self, exe, d, *args):
        self.port = kpitest.free_port()
        self.log_path = os.path.join(d, f"infer-{self.port}.log")
        log = open(self.log_path, "wb")
        self.p = subprocess.Popen([exe, "--model", servertest.tiny_model(), "--port",
                                   str(self.port), *map(str, args)],
                                  stdout=log, stderr=subprocess.STDOUT)
        log.close()
        kpitest.on_cleanup(self.kill)
        deadline = time.monotonic() + 60
        while "listening on http://" not in self.output():
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"kpi-infer did not start:\n{self.output()}")
            time.sleep(0.02)
        self.pid = self.p.pid

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            self.p.wait()


class Load:
    """Client threads sending mixed requests to whatever port self.port holds
    now, until stop().  Every Result is kept; rid prefixes say which
    lifetime a request went to."""

    def __init__(self, port, threads=3, max_tokens=(1, 16), prefix="load", tag=""):
        self.port, self.prefix, self.tag = port, prefix, tag
        self.results, self.lock = [], threading.Lock()
        self.go = True
        self.n = 0
        self.max_tokens = max_tokens
        self.ts = [threading.Thread(target=self._run, args=(w,), daemon=True)
                   for w in range(threads)]
        for t in self.ts:
            t.start()

    def _next(self):
        with self.lock:
            self.n += 1
            return self.n

    def _run(self, wid):
        import random
        rnd = random.Random(wid)
        conn, port = None, None
        while self.go:
            if port != self.port or conn is None or rnd.random() < 0.3:
                if conn:
                    conn.close()
                port = self.port
                conn = agenttest.Conn(port)
            stream = rnd.random() < 0.5
            res = agenttest.Result(f"{self.prefix}{self.tag}-{wid}-{self._next():06d}", stream)
            body = {"prompt": "the cat sat on the mat " * rnd.randint(1, 4),
                    "max_tokens": rnd.randint(*self.max_tokens), "temperature": 0}
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            try:
                conn.completion(res, body)
            except Exception as e:
                res.error = repr(e)
                conn.close()
                conn = None
                time.sleep(0.05)
            with self.lock:
                self.results.append(res)
        if conn:
            conn.close()

    def stop(self):
        self.go = False
        for t in self.ts:
            t.join(60)
        return self.results


def completed(results):
    """Requests whose client read a whole response (any status)."""
    return [r for r in results if r.t_end is not None and not isinstance(r.error, str)]


def db_ids(db):
    c = sqlite3.connect(db)
    try:
        return {r[0] for r in c.execute("SELECT request_id FROM requests")}
    finally:
        c.close()


def query(db, sql, *args):
    c = sqlite3.connect(db)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def report(name, **fields):
    """Adds one fault class's numbers to build/reliability/agent_faults.json."""
    fields["soak"] = SOAK
    fields["at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    kpitest.merge_json(REPORT, name, fields)
    print(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in sorted(fields.items())
                                     if k not in ("at", "soak")))


class Tmpfs:
    """A small tmpfs mounted for the test; unmounted on every path."""

    def __init__(self, d, size="8m"):
        self.path = os.path.join(d, "mnt")
        os.mkdir(self.path)
        r = kpitest.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", self.path])
        if r.returncode:
            raise kpitest.Skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
        kpitest.on_cleanup(self.umount)
        self.fill_path = os.path.join(self.path, "fill")

    def fill(self):
        """Writes until ENOSPC; returns the bytes written."""
        n = 0
        with open(self.fill_path, "ab", buffering=0) as f:
            block = b"\0" * 65536
            while True:
                try:
                    n += f.write(block)
                except OSError:
                    break
            # the last few pages
            try:
                while f.write(b"\0" * 512):
                    n += 512
            except OSError:
                pass
        return n

    def free(self):
        os.unlink(self.fill_path)

    def umount(self):
        subprocess.run(["umount", "-l", self.path], capture_output=True)


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def cap_bits(*names):
    bits = {"CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21, "CAP_NET_BIND_SERVICE": 10,
            "CAP_PERFMON": 38, "CAP_BPF": 39}
    v = 0
    for n in names:
        v |= 1 << bits[n]
    return v
