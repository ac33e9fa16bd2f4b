"""Helpers for the trace tools' tests (kpitop, kpi-report): build trace stores
with schema/001_init.sql and known synthetic traffic, read real ones, and
compute reference percentiles independently of the C code."""
import math, os, random, re, signal, sqlite3, subprocess, time

import kpitest

ROOT = kpitest.ROOT
SCHEMA = os.path.join(ROOT, "schema", "001_init.sql")
KPITOP = os.path.join(kpitest.BUILD, "kpitop")
REPORT = os.path.join(kpitest.BUILD, "kpi-report")
AGENT = os.path.join(kpitest.BUILD, "kpi-agent")
INFER = os.path.join(kpitest.BUILD, "kpi-infer")
BENCH = os.path.join(kpitest.BUILD, "kpi-bench")
EXT = os.path.join(kpitest.BUILD, "libkpi_sqlite.so")

T0 = 1_000 * 10**9                     # monotonic start of synthetic traces
NS = 10**9                             # a second, in ns
WALL0 = 1_764_670_000 * 10**9          # its wall-clock instant (2025-12-02)
MS = 10**6


def require(path, what):
    if not os.path.exists(path):
        raise kpitest.Skip(f"{os.path.relpath(path, ROOT)} is not built ({what}); run make")


def pct(values, p):
    """Percentile with linear interpolation between closest ranks (p 0..100),
    the definition kpitop, kpi-report and percentile() use."""
    v = sorted(values)
    if not v:
        return 0.0
    ix = (len(v) - 1) * p / 100.0
    lo = math.floor(ix)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (ix - lo)


def schema_files():
    """schema/NNN_*.sql, the agent's migrations, in version order."""
    sdir = os.path.join(ROOT, "schema")
    return [os.path.join(sdir, f) for f in sorted(os.listdir(sdir)) if f[:3].isdigit()]


def schema_version():
    """The version kpi-agent writes: its newest migration's number."""
    return int(os.path.basename(schema_files()[-1])[:3])


def migrate(db):
    """Applies the migrations after version 1 to an open connection, as
    kpi-agent does to an older trace."""
    for f in schema_files():
        if int(os.path.basename(f)[:3]) > 1:
            db.executescript(open(f).read())


def new_store(path):
    if os.path.exists(path):
        os.unlink(path)
    db = sqlite3.connect(path)
    db.executescript(open(SCHEMA).read())
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    return db


class Incident:
    """kind: queue | kv | cpu | prefill | network, over [start_s, end_s) of the trace."""

    def __init__(self, kind, start_s, end_s):
        self.kind, self.start_s, self.end_s = kind, start_s, end_s


def generate(path, duration_s=600, rate=20.0, incidents=(), seed=1, pid=4242, steps=True,
             inflight=5, progress=False, source="usdt"):
    """Write a synthetic trace: Poisson arrivals at rate/s for duration_s, with
    phases drawn around realistic values, samples every second, batch steps,
    and an in-flight table. Returns the sqlite3 connection (still open).
    source "http": the store is migrated to the newest schema and every row is
    one kpi-agent makes from an HTTP exchange (source 'http': queue, prefill
    and the engine's marks NULL, server_wait_ns holding queue and prefill;
    no samples, steps or in-flight rows, which that path does not write);
    "mixed": every other row so; "inferred": as "http", with the split
    kpi-agent infers from stream timing (split_rule 'step': queue, prefill,
    t_sched and t_first set, server_wait_ns NULL, decode from t_first);
    "mixed-inferred": every other row so, the rest as "usdt" (an engine with
    probes and one without on one host)."""
    assert source in ("usdt", "http", "mixed", "inferred", "mixed-inferred"), source
    rnd = random.Random(seed)
    db = new_store(path)
    if source != "usdt":
        migrate(db)
        if source in ("http", "inferred"):
            steps, inflight = False, 0
    off = WALL0 - T0
    db.execute("INSERT INTO agent_runs VALUES (1, ?, ?, 'synthetic', 'tracetest', NULL)", (WALL0, off))

    def incident_at(ts):
        for inc in incidents:
            if inc.start_s <= ts < inc.end_s:
                return inc.kind
        return None

    end = T0 + duration_s * 10**9
    per_sec = {}
    rows = []
    t = T0
    i = 0
    ins = ("INSERT INTO requests (request_id, pid, seq_id, run_id, wall_ns, t_arrive_ns, t_admit_ns, "
           "t_sched_ns, t_first_ns, t_last_ns, t_first_write_ns, t_done_ns, net_in_ns, queue_ns, "
           "prefill_ns, decode_ns, net_out_ns, ttft_ns, tpot_ns, e2e_ns, itl_p50_ns, itl_p99_ns, "
           "itl_max_ns, prompt_tokens, output_tokens, http_status, finish_reason, reject_reason, "
           "preemptions, srtt_us, runq_ns, source, server_wait_ns) "
           "VALUES (?,?,?,1,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
    if source == "usdt":      # a version-1 store has neither column
        ins = ins.replace(", source, server_wait_ns", "").replace("?,?,?)", "?)")
    if source in ("inferred", "mixed-inferred"):
        ins = ins.replace(", source, server_wait_ns)", ", source, server_wait_ns, split_rule, step_ns)") \
                 .replace("?,?,?)", "?,?,?,?,?)")
    while True:
        t += int(rnd.expovariate(rate) * 1e9) + 1
        if t >= end:
            break
        i += 1
        sec = (t - T0) // 10**9
        kind = incident_at(sec)
        s = per_sec.setdefault(sec, [0, 0, 0, 0, 0, kind])
        prompt = rnd.randint(16, 512)
        out = rnd.randint(8, 128)
        net_in = int(rnd.uniform(40, 200) * 1e3)
        queue = int(rnd.expovariate(1 / 2e6))
        prefill = int(prompt * rnd.uniform(0.15, 0.25) * MS)
        tpot = int(rnd.uniform(12, 18) * MS)
        net_out = int(rnd.uniform(50, 300) * 1e3)
        runq = int(rnd.uniform(0, 200) * 1e3)
        preempt = 0
        itl_max = int(tpot * rnd.uniform(1.5, 3))
        if kind == "queue":
            queue += int(rnd.uniform(200, 900) * MS)
        elif kind == "kv":
            queue += int(rnd.uniform(100, 500) * MS)
            if rnd.random() < 0.4:
                preempt = rnd.randint(1, 3)
                tpot = int(tpot * 1.5)
        elif kind == "cpu":
            runq = int(rnd.uniform(100, 400) * MS)
            prefill *= 3
            tpot *= 3
        elif kind == "prefill":
            prompt = rnd.randint(1500, 2048)
            prefill = int(prompt * 0.2 * MS)
            itl_max = int(rnd.uniform(150, 400) * MS)
        elif kind == "network":
            net_out = int(rnd.uniform(300, 900) * MS)
            net_in = int(rnd.uniform(100, 400) * MS)
        rid = f"req-{i:07d}"
        decode = tpot * (out - 1)
        admit = t + net_in
        sched = admit + queue
        first = sched + prefill
        last = first + decode
        fw = first + 40_000
        done = last + net_out
        ttft = fw - t
        status, fin = 200, "stop" if rnd.random() < 0.7 else "length"
        if rnd.random() < 0.002:
            status, fin = 500, "error"
        row = (rid, pid, i, t + off, t, admit, sched, first, last, fw, done, net_in, queue,
               prefill, decode, net_out, ttft, tpot, done - t, tpot, int(tpot * 1.4), itl_max,
               prompt, out, status, fin, None, preempt, 80, runq)
        if source == "http" or (source == "mixed" and i % 2):
            # the wire's view: the first content write ends the server wait,
            # the last one the decode; the engine's marks are unknown
            row = row[:5] + (None, None, None, None) + row[9:12] + (None, None, decode,
                  done - fw - decode) + row[16:27] + (0, 80, None, "http", ttft - net_in)
        elif source == "inferred" or (source == "mixed-inferred" and i % 2):
            # the wire's view with the split inferred: the engine's admission
            # and last token stay unknown, the first token is the step's end
            row = row[:5] + (None, sched, first, None) + row[9:12] + (queue, prefill,
                  fw + decode - first, done - fw - decode) + row[16:27] + (0, 80, None, "http", None,
                  "step", tpot)
        elif source != "usdt":
            row += ("usdt", None) + ((None, None) if source == "mixed-inferred" else ())
        rows.append(row)
        s[0] += 1
        s[1] += out
        s[2] += preempt
        s[3] += runq
        s[4] += status >= 400
        if len(rows) >= 50000:
            db.executemany(ins, rows)
            rows.clear()
            if progress:
                print(f"  {i} requests", flush=True)
    db.executemany(ins, rows)
    srows = []
    for sec in (range(duration_s) if source not in ("http", "inferred") else ()):
        c = per_sec.get(sec, [0, 0, 0, 0, 0, incident_at(sec)])
        kind = c[5]
        qd = {"queue": 40, "kv": 25, "cpu": 10}.get(kind, 1) + rnd.randint(0, 3)
        kv = 1.0 if kind == "kv" else rnd.uniform(0.2, 0.5)
        tsec = T0 + sec * 10**9 + 999_000_000
        srows.append((pid, tsec + off, tsec, qd, 8 if kind else rnd.randint(2, 6), int(kv * 1000),
                      1000 - int(kv * 1000), kv, c[0], c[1], c[2], 0, c[4], 0,
                      c[3] if kind == "cpu" else c[3] // 10))
    db.executemany("INSERT INTO samples (pid, run_id, wall_ns, t_ns, queue_depth, running, kv_used, "
                   "kv_free, kv_usage, requests_per_s, output_tokens_per_s, preemptions, rejections, "
                   "errors, drops, runq_ns) VALUES (?,1,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", srows)
    if steps:
        strows = []
        step = 0
        for sec in range(duration_s):
            kind = incident_at(sec)
            for k in range(20):
                step += 1
                ts = T0 + sec * 10**9 + k * 50 * MS
                pf = rnd.choice([0, 0, 0, 64, 256])
                dur = 20 * MS
                if kind == "prefill" and k % 4 == 0:
                    pf, dur = 2048, 300 * MS
                strows.append((pid, step, ts + off, ts, ts + dur, pf, 6, 300, 700))
        db.executemany("INSERT INTO steps (pid, step_id, run_id, wall_ns, t_start_ns, t_end_ns, "
                       "prefill_tokens, decode_seqs, kv_used, kv_free) VALUES (?,?,1,?,?,?,?,?,?,?)",
                       strows)
    for k in range(inflight):
        ta = end - (k + 1) * 300 * MS
        state = ["queued", "prefill", "decode", "decode", "writing"][k % 5]
        db.execute("INSERT INTO inflight VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (f"live-{k}", pid, state, ta, ta + 100_000,
                    ta + 50 * MS if state != "queued" else None,
                    ta + 150 * MS if state in ("decode", "writing") else None, 100, 3 * k, end))
    db.execute("INSERT INTO meta VALUES ('last_flush_ns', ?)", (end,))
    db.commit()
    return db


def window_rows(db, frm, to, cols="ttft_ns, tpot_ns, e2e_ns, queue_ns, prefill_ns, decode_ns"):
    return db.execute(f"SELECT {cols} FROM requests WHERE t_arrive_ns >= ? AND t_arrive_ns < ? "
                      "AND http_status IS NOT 429", (frm, to)).fetchall()


def parse_dur(s):
    """'12.3ms' / '850µs' / '1.24s' / '3m05s' / '-' -> ns (float) or None."""
    s = s.strip()
    if s == "-":
        return None
    if "m" in s and s.endswith("s") and not s.endswith("ms"):
        m, sec = s[:-1].split("m")
        return (int(m) * 60 + float(sec)) * 1e9
    for suf, mul in (("ns", 1), ("µs", 1e3), ("us", 1e3), ("ms", 1e6), ("s", 1e9)):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * mul
    raise ValueError(f"not a duration: {s!r}")


def close_to(shown, exact_ns):
    """Whether a rounded duration kpitop printed matches an exact value."""
    if shown is None:
        return exact_ns is None
    tol = max(abs(exact_ns) * 0.006, 1e3)   # 3 significant digits
    return abs(shown - exact_ns) <= tol


# ---- real recordings ---------------------------------------------------------

class Recording:
    """kpi-infer (tiny model) traced by the real kpi-agent into db; load() runs
    kpi-bench phases against it. Needs root; skips with the reason otherwise."""

    def __init__(self, db, *infer_args):
        kpitest.require_root("recording a trace with kpi-agent")
        for path, what in ((AGENT, "agent/"), (INFER, "daemon/"), (BENCH, "tools/kpi-bench/")):
            require(path, what)
        import servertest
        self.db = db
        self.daemon = servertest.Daemon(*infer_args)
        self.pid = self.daemon.p.pid
        self.url = f"http://127.0.0.1:{self.daemon.port}"
        self.agent = kpitest.Proc([AGENT, "--db", db, "--pid", str(self.pid), "--flush-ms", "200"])
        self.agent.wait_line(f"attached to pid {self.pid}", timeout=60)

    def load(self, *bench_args, timeout=300):
        """One kpi-bench run; returns its (start, end) as Unix seconds."""
        t0 = time.time()
        p = kpitest.run([BENCH, "--url", self.url, "--quiet", *map(str, bench_args)], timeout=timeout)
        t1 = time.time()
        if p.returncode not in (0, 1):
            raise AssertionError(f"kpi-bench {bench_args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return t0, t1

    def stop(self):
        """Stops the agent (it flushes on SIGINT), then the daemon."""
        time.sleep(1.5)   # one more flush and sample
        rc = self.agent.stop(signal.SIGINT)
        assert rc == 0, f"kpi-agent exited {rc}:\n" + "\n".join(self.agent.lines[-20:])
        self.daemon.stop()


REPORT_FINDING = re.compile(r"^(\d+)\. \*\*(.+?)\*\* — phase: \*\*(.+?)\*\*; cause: \*\*(.+?)\*\*\.", re.M)


def report_findings(md):
    """kpi-report's findings in its markdown, in order: (title, phase, cause)."""
    f = REPORT_FINDING.findall(md)
    assert f, f"no findings in:\n{md}"
    return [(title, phase, cause) for _, title, phase, cause in f]


def run_tool(argv, timeout=120, env=None):
    e = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8", TZ="UTC")
    if env:
        e.update(env)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e)


def kpitop_once(db, *args):
    """One kpitop --once frame of db (a trace, or clickhouse://...), 120
    columns unless args say otherwise; its text."""
    require(KPITOP, "tools/kpitop/")
    p = run_tool([KPITOP, "--db", db, "--once", "--width", "120", *args])
    assert p.returncode == 0, f"kpitop --once exited {p.returncode}: {p.stderr}"
    return p.stdout


def hops_trace(path, n, step_ns=10_000_000):
    """A trace of n three-hop requests (a gateway's request, its call, the
    model's request: schema 008's rows, linked by header and socket), then
    one whose top lasted 60 s and whose call reached the model 40 s in
    ("m-long"): the longest request, for tools that read around a request."""
    db = new_store(path)
    migrate(db)
    db.execute(f"PRAGMA user_version = {schema_version()}")
    cols = ("request_id, pid, run_id, wall_ns, t_arrive_ns, t_done_ns, e2e_ns, source, direction, "
            "hop_id, parent_hop_id, link_rule, comm, sock_local, sock_peer, path")

    def rows(i, t, top_e2e, call_at, model_at, model_e2e, mid):
        cport, mport = 20000 + i % 30000, 40000 + i % 20000
        path = "/v1/chat/completions"
        top = (f"r{i}", 100, 1, t, t, t + top_e2e, top_e2e, "http", "in", f"100.{t}", None, None,
               "gateway", "127.0.0.1:8000", f"127.0.0.1:{cport}", path)
        out = (f"r{i}", 100, 1, t + call_at, t + call_at, t + model_at + model_e2e + 100_000,
               model_at + model_e2e + 100_000 - call_at, "http", "out", f"100.{t + call_at}", f"100.{t}",
               "header", "gateway", f"127.0.0.1:{mport}", "127.0.0.1:9000", path)
        model = (mid, 200, 1, t + model_at, t + model_at, t + model_at + model_e2e, model_e2e, "usdt", "in",
                 None, None, None, "kpi-infer", "127.0.0.1:9000", f"127.0.0.1:{mport}", path)
        return top, out, model

    ins, outs = [], []
    for i in range(n):
        top, out, model = rows(i, T0 + i * step_ns, 9_000_000, 1_000_000, 1_100_000, 6_800_000, f"r{i}")
        ins += [top, model]
        outs.append(out)
    top, out, model = rows(n, T0 + n * step_ns, 60 * NS, NS, 40 * NS, 10 * NS, "m-long")
    ins += [top, model]
    outs.append(out)
    q = ",".join("?" * 16)
    db.executemany(f"INSERT INTO requests({cols}) VALUES ({q})", ins)
    db.executemany(f"INSERT INTO exchanges_out({cols}) VALUES ({q})", outs)
    db.commit()
    db.close()


def disagg_trace(path, n=24, weight_type="Q4_K", seed=5):
    """A trace of n disaggregated requests as kpi-agent joins them
    (schema/010_disagg.sql): each a router's row (pd_role 'router', no weight
    type: the router maps no model; its phases across the three processes
    summing to e2e), the decode worker's row under it and the prefill
    worker's under that, both naming weight_type, with their own (shorter)
    TTFTs.  Returns {column: [the router rows' values]}."""
    rnd = random.Random(seed)
    db = new_store(path)
    migrate(db)
    db.execute(f"PRAGMA user_version = {schema_version()}")
    off = WALL0 - T0
    db.execute("INSERT INTO agent_runs VALUES (1, ?, ?, 'synthetic', 'tracetest', NULL)", (WALL0, off))
    cols = ("request_id", "pid", "run_id", "wall_ns", "t_arrive_ns", "t_admit_ns", "t_sched_ns", "t_first_ns",
            "t_last_ns", "t_done_ns", "net_in_ns", "queue_ns", "prefill_ns", "decode_ns", "net_out_ns",
            "ttft_ns", "tpot_ns", "e2e_ns", "prompt_tokens", "output_tokens", "http_status", "finish_reason",
            "source", "direction", "hop_id", "parent_hop_id", "link_rule", "comm", "weight_type", "pd_role",
            "router_ns", "kv_transfer_ns", "decode_queue_ns", "t_kv_end_ns", "t_pd_sched_ns", "kv_bytes",
            "kv_status")
    want = {c: [] for c in cols}
    rows = []
    for i in range(n):
        t = T0 + i * 250 * MS + rnd.randrange(50 * MS)
        ph = {"net_in_ns": rnd.randrange(50_000, 200_000), "router_ns": rnd.randrange(200_000, 2 * MS),
              "queue_ns": rnd.randrange(1 * MS, 40 * MS), "prefill_ns": rnd.randrange(20 * MS, 900 * MS),
              "kv_transfer_ns": rnd.randrange(1 * MS, 30 * MS), "decode_queue_ns": rnd.randrange(0, 5 * MS),
              "decode_ns": rnd.randrange(50 * MS, 400 * MS), "net_out_ns": rnd.randrange(50_000, 300_000)}
        m = [t]
        for k in ("net_in_ns", "router_ns", "queue_ns", "prefill_ns", "kv_transfer_ns", "decode_queue_ns",
                  "decode_ns", "net_out_ns"):
            m.append(m[-1] + ph[k])
        # marks: arrive, decision, decode admitted, prefill sched, first
        # token, KV in, decode sched, last token, done
        arrive, decide, d_admit, p_sched, p_first, kv_end, d_sched, last, done = m
        out_tok, prompt = rnd.randrange(2, 17), rnd.randrange(2, 400)
        rid = f"pd-{i}"
        router = dict(zip(cols, [None] * len(cols)))
        router.update(request_id=rid, pid=100, run_id=1, wall_ns=arrive + off, t_arrive_ns=arrive,
                      t_admit_ns=decide, t_sched_ns=p_sched, t_first_ns=p_first, t_last_ns=last,
                      t_done_ns=done, ttft_ns=kv_end + ph["decode_queue_ns"] // 2 + 300_000 - arrive,
                      tpot_ns=ph["decode_ns"] // out_tok, e2e_ns=done - arrive, prompt_tokens=prompt,
                      output_tokens=out_tok, http_status=200, finish_reason="length", source="usdt",
                      direction="in", comm="kpi-infer", pd_role="router", t_kv_end_ns=kv_end,
                      t_pd_sched_ns=d_sched, kv_bytes=prompt * 4096, kv_status="ok", **ph)
        d_arrive = decide + ph["router_ns"] // 2
        decode = dict(router, pid=200, wall_ns=d_arrive + off, t_arrive_ns=d_arrive, t_admit_ns=d_admit,
                      net_in_ns=d_admit - d_arrive, router_ns=None, ttft_ns=router["ttft_ns"] - (d_arrive - arrive),
                      e2e_ns=last + 100_000 - d_arrive, t_done_ns=last + 100_000, net_out_ns=100_000,
                      parent_hop_id=f"100.{arrive}", link_rule="header", weight_type=weight_type,
                      pd_role="decode")
        p_arrive = d_admit + 100_000
        prefill = dict(zip(cols, [None] * len(cols)))
        prefill.update(request_id=rid, pid=300, run_id=1, wall_ns=p_arrive + off, t_arrive_ns=p_arrive,
                       t_admit_ns=p_arrive + 50_000, t_sched_ns=p_sched, t_first_ns=p_first,
                       t_last_ns=p_first, t_done_ns=kv_end, net_in_ns=50_000,
                       queue_ns=p_sched - p_arrive - 50_000, prefill_ns=p_first - p_sched, decode_ns=0,
                       net_out_ns=kv_end - p_first, ttft_ns=p_first - p_arrive, e2e_ns=kv_end - p_arrive,
                       prompt_tokens=prompt, output_tokens=1, http_status=200, finish_reason="length",
                       source="usdt", direction="in", comm="kpi-infer", parent_hop_id=f"200.{d_arrive}",
                       link_rule="header", weight_type=weight_type, pd_role="prefill", kv_bytes=prompt * 4096,
                       kv_status="ok")
        for r in (router, decode, prefill):
            rows.append(tuple(r[c] for c in cols))
        for c in cols:
            want[c].append(router[c])
    db.executemany(f"INSERT INTO requests({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})", rows)
    db.commit()
    db.close()
    return want


def agents_trace(path, change=None, seed=3):
    """A trace of two minutes (baseline: the first, incident: the second)
    with what schema 011 adds: a reasoning model's rows (2 a second, 20
    reasoning events at 10 ms then the answer), an agent's tasks (one every 4
    s: three model calls of 100 ms, a "search" and an MCP "lookup" tool call,
    1 ms of its own work between calls; every fifth task's search fails once
    and is retried) and a cascade gateway (2 requests a second to "small", 50
    ms; 20% escalated to "large", 300 ms).  change, in the incident minute:
    "think" 60 reasoning events, "slow" 30 ms a reasoning event (and TTFT
    doubled), "tool" the search takes 200 ms, "escalate" 60% escalated,
    "large_slow" large takes 900 ms.  Returns {"base": (from, to), "inc":
    (from, to)} as @UNIX seconds for kpi-report."""
    rnd = random.Random(seed)
    db = new_store(path)
    migrate(db)
    db.executescript(open(os.path.join(ROOT, "schema", "views.sql")).read())   # as kpi-agent does
    db.execute(f"PRAGMA user_version = {schema_version()}")
    off = WALL0 - T0
    db.execute("INSERT INTO agent_runs VALUES (1, ?, ?, 'synthetic', 'tracetest', NULL)", (WALL0, off))
    req_cols = ("request_id, pid, run_id, wall_ns, t_arrive_ns, t_done_ns, e2e_ns, ttft_ns, ttfo_ns, "
                "reasoning_ns, reasoning_events, answer_events, content_events, source, direction, hop_id, "
                "comm, sock_local, sock_peer, path, http_status, end_reason, model, prompt_tokens, "
                "output_tokens, task_id")
    out_cols = ("request_id, pid, run_id, wall_ns, t_arrive_ns, t_done_ns, e2e_ns, source, direction, hop_id, "
                "parent_hop_id, link_rule, comm, sock_local, sock_peer, path, http_status, end_reason, model, "
                "task_id, call_kind, rpc_method, tool_name, retry, call_error, escalated_from")
    reqs, outs, tasks = [], [], []
    port = [30000]

    def ends():
        port[0] += 1
        return f"127.0.0.1:{port[0]}"

    def model_row(rid, pid, comm, t, e2e, model, ttft=None, events=0, pace=0, cost_end=None):
        ttfo = None if ttft is None else ttft + events * pace
        peer = cost_end or ends()
        reqs.append((rid, pid, 1, t + off, t, t + e2e, e2e, ttft, ttfo, events * pace if events else None,
                     events or None, 5 if ttft is not None else None, events + 5 if ttft is not None else None,
                     "http", "in", f"{pid}.{t}", comm, "127.0.0.1:9000", peer, "/v1/chat/completions", 200,
                     "complete", model, 20, events + 5, None))
        return peer

    def call(pid, comm, t, e2e, task, kind, model=None, tool=None, rpc=None, retry=0, error=0, esc=None,
             model_pid=None, model_comm=None):
        hop = f"{pid}.{t}"
        local = ends()
        outs.append((f"out-{hop}", pid, 1, t + off, t, t + e2e, e2e, "http", "out", hop, task, "thread", comm,
                     local, "127.0.0.1:9000" if kind == "model" else "127.0.0.1:9100",
                     "/v1/chat/completions" if kind == "model" else "/mcp" if rpc else f"/tools/{tool}",
                     500 if error else 200, "complete", model, task, kind, rpc, tool, retry, error, esc))
        if kind == "model" and model_pid:
            # the model server's own row, on the other end of the call's connection
            reqs.append((f"m-{hop}", model_pid, 1, t + 100_000 + off, t + 100_000, t + e2e - 100_000,
                         e2e - 200_000, None, None, None, None, None, None, "http", "in", f"{model_pid}.{t}",
                         model_comm, "127.0.0.1:9000", local, "/v1/chat/completions", 200, "complete", model,
                         20, 5, None))
        return hop

    for minute in (0, 1):
        ch = change if minute else None
        t0 = T0 + minute * 60 * NS
        # the reasoning model server
        for k in range(120):
            t = t0 + k * NS // 2 + rnd.randrange(0, 10 * MS)
            events = 60 if ch == "think" else 20
            pace = 30 * MS if ch == "slow" else 10 * MS
            ttft = (100 if ch == "slow" else 50) * MS
            model_row(f"rq-{minute}-{k}", 500, "vllm", t, ttft + events * pace + 5 * pace, "r1", ttft, events, pace)
        # the agent's tasks
        for k in range(15):
            t = t0 + k * 4 * NS
            task = f"900.{t}"
            cur, n = t + MS, {"model": 0, "tool": 0, "retries": 0, "errors": 0}
            steps = ["model", "search", "model", "lookup", "model"]
            if k % 5 == 0:
                steps.insert(2, "search-fail")
            for s in steps:
                if s == "model":
                    call(900, "agent", cur, 100 * MS, task, "model", model="tiny", model_pid=501,
                         model_comm="kpi-infer")
                    cur += 100 * MS
                    n["model"] += 1
                elif s == "lookup":
                    call(900, "agent", cur, 20 * MS, task, "tool", tool="lookup", rpc="tools/call")
                    cur += 20 * MS
                    n["tool"] += 1
                else:
                    d = (200 if ch == "tool" else 20) * MS
                    fail = s == "search-fail"
                    call(900, "agent", cur, d, task, "tool", tool="search", error=int(fail),
                         retry=int(s == "search" and k % 5 == 0))
                    n["tool"] += 1
                    n["errors"] += int(fail)
                    n["retries"] += int(s == "search" and k % 5 == 0)
                    cur += d
                cur += MS
            dur = cur - t
            model_ns = n["model"] * 100 * MS
            tool_ns = sum((200 if ch == "tool" else 20) * MS for s in steps if s.startswith("search")) + 20 * MS
            tasks.append((task, 900, "agent", 1, t + off, "inbound", task, f"task-{minute}-{k}", t, cur, dur,
                          n["model"], n["tool"], 1, n["retries"], n["errors"], model_ns, tool_ns,
                          dur - model_ns - tool_ns, 1, 200))
            reqs.append((f"task-{minute}-{k}", 900, 1, t + off, t, cur, dur, None, None, None, None, None, None,
                         "http", "in", task, "agent", "127.0.0.1:8000", ends(), "/task", 200, "complete",
                         None, None, None, task))
        # the cascade gateway
        rate = 0.6 if ch == "escalate" else 0.2
        large = (900 if ch == "large_slow" else 300) * MS
        for k in range(120):
            t = t0 + k * NS // 2
            top = f"700.{t}"
            first = call(700, "gateway", t + MS, 50 * MS, top, "model", model="small", model_pid=502,
                         model_comm="kpi-infer")
            esc = (k * 7919) % 100 < rate * 100
            if esc:
                call(700, "gateway", t + 52 * MS, large, top, "model", model="large", esc=first, model_pid=503,
                     model_comm="kpi-infer")
            end = t + (52 * MS + large if esc else 52 * MS)
            reqs.append((f"gw-{minute}-{k}", 700, 1, t + off, t, end, end - t, None, None, None, None, None,
                         None, "http", "in", top, "gateway", "127.0.0.1:8100", ends(), "/v1/chat/completions",
                         200, "complete", None, None, None, None))
    q = ",".join("?" * len(req_cols.split(",")))
    db.executemany(f"INSERT INTO requests({req_cols}) VALUES ({q})", reqs)
    q = ",".join("?" * len(out_cols.split(",")))
    db.executemany(f"INSERT INTO exchanges_out({out_cols}) VALUES ({q})", outs)
    db.executemany("INSERT INTO tasks(task_id, pid, comm, run_id, wall_ns, rule, hop_id, request_id, t_start_ns, "
                   "t_end_ns, duration_ns, model_calls, tool_calls, mcp_calls, retries, errors, model_ns, "
                   "tool_ns, agent_ns, success, http_status) VALUES (" + ",".join("?" * 21) + ")", tasks)
    db.commit()
    db.close()
    wall = lambda t: f"@{(t + off) / NS:.3f}"
    return {"base": (wall(T0), wall(T0 + 60 * NS)), "inc": (wall(T0 + 60 * NS), wall(T0 + 120 * NS))}
