"""Helpers for kpi-bench's tests and benchmarks: start a real kpi-infer on a
generated tiny model, run kpi-bench, read its CSV/JSON, and a byte-relaying
TCP proxy that records every x-request-id the server sends."""
import contextlib, csv, json, os, re, shutil, socket, statistics, subprocess, tempfile, threading

import kpitest

ROOT = kpitest.ROOT
BENCH = os.path.join(kpitest.BUILD, "kpi-bench")
INFER = os.path.join(kpitest.BUILD, "kpi-infer")

_model_dir = None


def require_built(need_server=True):
    if not os.path.exists(BENCH):
        raise kpitest.Skip("build/kpi-bench is not built; run make")
    if need_server and not os.path.exists(INFER):
        raise kpitest.Skip("build/kpi-infer is not built (daemon/ does not link yet); run make")


def preset_model(preset="tiny"):
    """A GGUF of the preset (tiny unless told), generated once per process
    (deterministic)."""
    global _model_dir
    if _model_dir is None:
        _model_dir = tempfile.mkdtemp(prefix="kpi-bench-model-")
        import atexit
        atexit.register(shutil.rmtree, _model_dir, True)
    path = os.path.join(_model_dir, f"{preset}.gguf")
    if not os.path.exists(path):
        kpitest.run([INFER, "--make-model", path, "--preset", preset], timeout=120, check=True)
    return path


def start_server(*extra, model=None):
    """kpi-infer on a free port; returns (Proc, base URL). Stopped by cleanup."""
    port = kpitest.free_port()
    p = kpitest.Proc([INFER, "--model", model or preset_model(), "--port", str(port), *extra])
    p.wait_line("listening on http://", timeout=60)
    return p, f"http://127.0.0.1:{port}"


def kpi_bench(*args, timeout=180):
    """Run kpi-bench to the end; returns CompletedProcess (text)."""
    return kpitest.run([BENCH, "--quiet", *map(str, args)], timeout=timeout)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_json(path):
    with open(path) as f:
        return json.load(f)


class IdProxy:
    """Relays TCP between kpi-bench and the server unchanged, and records the
    x-request-id header of every response that passes: the server's own
    word on each id, to check kpi-bench's CSV against."""

    HDR = re.compile(rb"\r\nx-request-id:[ \t]*([^\r\n]*?)[ \t]*\r\n", re.I)

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.ids = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
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
            u = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, True), daemon=True).start()

    def _pipe(self, src, dst, from_server):
        tail = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_server:
                    # headers may straddle two reads: scan with the previous tail
                    buf = tail + data
                    found = self.HDR.findall(buf)
                    if found:
                        with self.lock:
                            self.ids.extend(x.decode() for x in found)
                        buf = buf[buf.rfind(b"\r\n"):]   # never count one header twice
                    tail = buf[-200:]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# ---- the BPF programs' own time (benchmarks) ------------------------------------------

STATS_PATH = "/proc/sys/kernel/bpf_stats_enabled"


@contextlib.contextmanager
def bpf_stats():
    """kernel.bpf_stats_enabled for the duration, put back as it was after
    (the counting itself costs two clock reads per program run: rounds under
    it stay out of the wall-time ratios)."""
    with open(STATS_PATH) as f:
        was = f.read().strip()
    with open(STATS_PATH, "w") as f:
        f.write("1")
    try:
        yield
    finally:
        with open(STATS_PATH, "w") as f:
            f.write(was)


def bpf_programs(prefixes):
    """run_cnt / run_time_ns of the loaded programs whose name starts with one
    of prefixes, by id ({} when bpftool cannot say)."""
    p = kpitest.run(["bpftool", "prog", "show", "--json"])
    if p.returncode != 0:
        return {}
    return {x["id"]: x for x in json.loads(p.stdout) if x.get("name", "").startswith(tuple(prefixes))}


def bpf_delta(before, after):
    """{program name: {"runs", "ns"}} between two bpf_programs() readings
    (programs of one name summed: one per attach)."""
    out = {}
    for i, a in after.items():
        b = before.get(i, {})
        d = out.setdefault(a["name"], {"runs": 0, "ns": 0})
        d["runs"] += a.get("run_cnt", 0) - b.get("run_cnt", 0)
        d["ns"] += a.get("run_time_ns", 0) - b.get("run_time_ns", 0)
    return {k: v for k, v in out.items() if v["runs"]}


def bpf_add(total, delta):
    """Adds one bpf_delta() into a running {name: {"runs", "ns"}} total."""
    for name, v in delta.items():
        p = total.setdefault(name, {"runs": 0, "ns": 0})
        p["runs"] += v["runs"]
        p["ns"] += v["ns"]
    return total


def cpu_s(pid):
    """CPU time of every thread of pid, in seconds, from schedstat (ns: the
    clock-tick counts of /proc/PID/stat are too coarse for a short round)."""
    return kpitest.schedstat_ns(pid, kpitest.SCHED_CPU) / 1e9


def bench_args(description):
    """A benchmark's command line (--out DIR, --quick), its DIR made."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=os.path.join(kpitest.BUILD, "bench"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return args


def agg(vals):
    """Median with min-max spread (and count) of the values that are not None."""
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return dict(median=statistics.median(vals), min=min(vals), max=max(vals), n=len(vals))


def cell(a, fmt="{:.1f}"):
    """An agg() as "median (min-max)", the median alone for one value, "-" for none."""
    if not a:
        return "-"
    if a["n"] == 1:
        return fmt.format(a["median"])
    return f"{fmt.format(a['median'])} ({fmt.format(a['min'])}-{fmt.format(a['max'])})"
