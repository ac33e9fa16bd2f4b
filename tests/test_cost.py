"""Cost and energy per request (issue 23, docs/cost.md), for real: root, real
BPF, real kpi-infer under load, RAPL counters in a powercap directory this
test writes and advances at known rates (wrap-arounds included)."""
import ctypes, os, re, threading, time

import kpitest
import agenttest as at
import faulttest as ft
import promtext
import servertest

PKG_RANGE = 262143328850      # a real package zone's max_energy_range_uj
DRAM_RANGE = 65712999613
PKG_STEP, DRAM_STEP = 1000003, 100019   # µJ per 20 ms tick: ~50 W and ~5 W
TICK = 0.02
PRICE = 3.6                   # USD an hour: 1e-3 USD a second


class Powercap:
    """intel-rapl:0 (package-0) with its dram subzone intel-rapl:0:0, counters
    advanced every TICK by a thread; every value written is remembered with
    the unwrapped total it stands for."""

    def __init__(self, d):
        self.root = d
        self.zones = {}
        for name, sub, rng, step, start in (
                ("package-0", "intel-rapl:0", PKG_RANGE, PKG_STEP, PKG_RANGE - 5 * PKG_STEP * 50),
                ("dram", "intel-rapl:0/intel-rapl:0:0", DRAM_RANGE, DRAM_STEP,
                 DRAM_RANGE - 3 * DRAM_STEP * 50)):
            zd = os.path.join(d, sub)
            os.makedirs(zd)
            for f, v in (("name", name), ("max_energy_range_uj", rng)):
                with open(os.path.join(zd, f), "w") as fh:
                    fh.write(f"{v}\n")
            path = os.path.join(zd, "energy_uj")
            with open(path, "w") as fh:
                fh.write(f"{start:020d}\n")
            key = "dram-0" if name == "dram" else name
            self.zones[key] = dict(path=path, range=rng, step=step, total=0, start=start,
                                   seen={start: 0}, fd=os.open(path, os.O_WRONLY))
        self.go = False
        self.lock = threading.Lock()

    def _tick(self):
        for z in self.zones.values():
            z["total"] += z["step"]
            v = (z["start"] + z["total"]) % z["range"]
            z["seen"][v] = z["total"]
            # in place, fixed width: the agent keeps the file open and preads it
            os.pwrite(z["fd"], f"{v:020d}\n".encode(), 0)

    def _run(self):
        nxt = time.monotonic()
        while self.go:
            nxt += TICK
            with self.lock:
                self._tick()
            time.sleep(max(0, nxt - time.monotonic()))

    def start(self):
        self.go = True
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def stop(self):
        self.go = False
        self.t.join()

    def unwrapped(self, domain, reading):
        """The total a reading of the agent stands for (it must be a value written)."""
        z = self.zones[domain]
        assert reading in z["seen"], f"{domain}: the agent read {reading}, never written"
        return z["seen"][reading]

    def wrapped(self):
        return {k: z["start"] + z["total"] >= z["range"] for k, z in self.zones.items()}


_rows = at.query      # the rows of one query, as dicts


def _window_sums(db, t0, t1):
    """Energy (µJ) and cost of the cost_samples intervals ending in (t0, t1] and
    of the requests that ended in it."""
    iv = _rows(db, "SELECT * FROM cost_samples WHERE t_ns > ? AND t_ns <= ?", t0, t1)
    rq = _rows(db, "SELECT energy_j, cost_usd, machine_ns, output_tokens, prompt_tokens "
               "FROM requests WHERE t_done_ns > ? AND t_done_ns <= ? AND seq_id IS NOT NULL",
               t0, t1)
    return iv, rq


def _uj(j):
    return int(round(j * 1e6))


def _metered(name, max_seqs):
    """A kpi-infer, test-driven RAPL counters (started), a trace path and a
    free port for /metrics."""
    ft.require()
    d = ft.workdir()
    pc = Powercap(os.path.join(d, "powercap"))
    daemon = servertest.Daemon("--max-seqs", max_seqs)
    mport = kpitest.free_port()
    pc.start()
    return pc, os.path.join(d, name), daemon, mport


def _priced_agent(db, pc, daemon, mport):
    """The agent on daemon, reading pc's counters, at PRICE, serving /metrics."""
    return at.start_agent(db, "--flush-ms", 100, "--powercap-root", pc.root, "--price-per-hour",
                          PRICE, "--metrics", f"127.0.0.1:{mport}", pid=daemon.p.pid)


def test_cost_attribution_exact_on_kpi_infer():
    """Per window the requests' energy plus the idle line equals the counters'
    delta to the µJ (wraps included); cost sums to price x duration; half the
    batch size costs about twice as much per token."""
    pc, db, daemon, mport = _metered("cost.db", 8)
    agent = _priced_agent(db, pc, daemon, mport)
    said = [l for l in agent.lines if l.startswith("energy:")]
    assert said and "rapl:package-0,dram-0" in said[0], agent.lines
    marks = []
    try:
        time.sleep(2.2)
        for threads in (4, 2, 1):
            marks.append(time.monotonic_ns())
            load = ft.Load(daemon.port, threads=threads, max_tokens=(24, 24), prefix=f"b{threads}-")
            time.sleep(5)
            res = load.stop()
            assert len(ft.completed(res)) >= 3, f"{threads} threads: {len(res)} requests"
            time.sleep(2.5)  # idle: steps end, a boundary sample falls in the gap
        marks.append(time.monotonic_ns())
        scrape1 = promtext.by_key(kpitest.http_request(mport, "GET", "/metrics")[2].decode())
        time.sleep(1.2)
        scrape2 = promtext.by_key(kpitest.http_request(mport, "GET", "/metrics")[2].decode())
    finally:
        pc.stop()
    time.sleep(1.5)  # the agent reads the counters' final values at least once
    assert agent.stop() == 0, agent.lines[-20:]
    assert all(pc.wrapped().values()), f"the counters were meant to wrap: {pc.wrapped()}"

    # every reading is a value the test wrote; the deltas are the test's own
    rd = _rows(db, "SELECT * FROM energy_readings ORDER BY t_ns")
    by_dom = {}
    for r in rd:
        by_dom.setdefault(r["domain"], []).append(r)
    assert set(by_dom) == {"package-0", "dram-0"}, set(by_dom)
    expect_total = 0
    for dom, rows in by_dom.items():
        assert rows[0]["delta_uj"] is None and all(r["delta_uj"] is not None for r in rows[1:])
        for a, b in zip(rows, rows[1:]):
            want = pc.unwrapped(dom, b["reading_uj"]) - pc.unwrapped(dom, a["reading_uj"])
            assert b["delta_uj"] == want, (dom, a, b, want)
        expect_total += pc.unwrapped(dom, rows[-1]["reading_uj"]) - pc.unwrapped(dom, rows[0]["reading_uj"])
    t_first = min(r["t_ns"] for r in rd)

    iv = _rows(db, "SELECT * FROM cost_samples ORDER BY t_ns")
    delta_at = {}
    for r in rd:
        delta_at[r["t_ns"]] = delta_at.get(r["t_ns"], 0) + (r["delta_uj"] or 0)
    for r in iv:
        assert r["energy_uj"] == delta_at[r["t_ns"]], r
        assert r["interval_ns"] == r["busy_ns"] + r["idle_ns"], r
    assert sum(r["energy_uj"] for r in iv) == expect_total

    reqs = _rows(db, "SELECT * FROM requests WHERE seq_id IS NOT NULL")
    assert reqs and all(r["energy_j"] is not None and r["cost_usd"] is not None
                        and r["machine_ns"] is not None for r in reqs), \
        [r for r in reqs if r["energy_j"] is None][:3]
    req_uj = sum(_uj(r["energy_j"]) for r in reqs)
    idle_uj = sum(r["idle_energy_uj"] + r["unattributed_energy_uj"] for r in iv)
    assert req_uj + idle_uj == expect_total, (req_uj, idle_uj, expect_total)

    # per window: a load phase and the idle gap after it
    mono = [t_first] + [max(r["t_ns"] for r in iv if r["t_ns"] <= m) for m in marks[1:]] + [iv[-1]["t_ns"]]
    windows = []
    for k in range(len(mono) - 1):
        w_iv, w_rq = _window_sums(db, mono[k], mono[k + 1])
        w_req = sum(_uj(r["energy_j"]) for r in w_rq)
        w_idle = sum(r["idle_energy_uj"] + r["unattributed_energy_uj"] for r in w_iv)
        w_counters = sum(delta_at[r["t_ns"]] for r in w_iv)
        assert w_req + w_idle == w_counters, (k, w_req, w_idle, w_counters)
        dur = sum(r["interval_ns"] for r in w_iv)
        cost = sum(r["cost_usd"] for r in w_rq) + sum(r["idle_cost_usd"] for r in w_iv) \
            + sum(r["unattributed_ns"] for r in w_iv) * PRICE / 3.6e12
        tokens = sum(r["output_tokens"] or 0 for r in w_rq)
        req_cost = sum(r["cost_usd"] for r in w_rq)
        windows.append(dict(requests=len(w_rq), tokens=tokens, dur_s=dur / 1e9, cost=cost,
                            energy_j=w_counters / 1e6, req_energy_j=w_req / 1e6,
                            usd_per_mtok=cost / max(tokens, 1) * 1e6,
                            req_usd_per_mtok=req_cost / max(tokens, 1) * 1e6,
                            req_j_per_tok=w_req / 1e6 / max(tokens, 1)))

    # cost: the requests plus idle is price x duration
    dur_ns = iv[-1]["t_ns"] - t_first
    assert sum(r["interval_ns"] for r in iv) == dur_ns
    total = sum(r["cost_usd"] for r in reqs) + sum(r["idle_cost_usd"] for r in iv) + \
        sum(r["unattributed_ns"] for r in iv) * PRICE / 3.6e12
    assert abs(total - PRICE * dur_ns / 3.6e12) < 1e-9, (total, PRICE * dur_ns / 3.6e12)

    # batch size and step time per window, from the steps
    batch, tau = [], []
    for k in range(len(windows)):
        s = _rows(db, "SELECT avg(decode_seqs + (prefill_tokens > 0)) AS b, "
                  "avg(t_end_ns - t_start_ns) AS tau FROM steps "
                  "WHERE t_end_ns > ? AND t_end_ns <= ?", mono[k], mono[k + 1])
        batch.append(s[0]["b"] or 0.0)
        tau.append(s[0]["tau"] or 0.0)
    unattr = sum(r["unattributed_ns"] for r in iv)
    print(f"     counters {expect_total} µJ = requests {req_uj} + idle {idle_uj}; "
          f"{len(reqs)} requests, {len(iv)} intervals, {dur_ns / 1e9:.3f} s, "
          f"${total:.9f} = {PRICE} x {dur_ns / 3.6e12:.9f} h; unattributed {unattr / 1e6:.3f} ms")
    for k, w in enumerate(windows):
        print(f"     window {k}: batch {batch[k]:.2f}, step {tau[k] / 1e3:.0f} µs, " +
              ", ".join(f"{a}={b:.6g}" if isinstance(b, float) else f"{a}={b}" for a, b in w.items()))
    # the same price, half the batch: a step's time is shared by half as many
    # sequences, so each token costs twice as much at the same step time (on a
    # CPU a smaller batch also runs shorter steps: that factor is divided out)
    ratio = windows[2]["req_usd_per_mtok"] / windows[1]["req_usd_per_mtok"]
    total_ratio = windows[2]["usd_per_mtok"] / windows[1]["usd_per_mtok"]
    bratio = batch[1] / batch[2]
    at_same_step = ratio * tau[1] / tau[2]
    print(f"     batch {batch[1]:.2f} -> {batch[2]:.2f} (x{1 / bratio:.2f}): requests' cost per "
          f"token x{ratio:.2f}, x{at_same_step:.2f} at the same step time; the window's (idle "
          f"included) x{total_ratio:.2f}")
    assert 1.5 <= bratio <= 2.5, f"the 1-thread window was meant to halve the batch: {batch}"
    assert 0.8 * bratio <= at_same_step <= 1.25 * bratio, (at_same_step, bratio, windows)
    # the raw ratio is reported, not asserted: with shorter steps it fell to
    # x0.91 in a quiet suite run here, while the step-time check above held

    # /metrics: counters a Prometheus can rate()
    for dom in ("package-0", "dram-0"):
        k = f'kpi_energy_joules_total{{domain="{dom}"}}'
        assert k in scrape1 and scrape2[k] > scrape1[k] > 0, (k, scrape1.get(k), scrape2.get(k))
    assert scrape2["kpi_cost_usd_total"] > scrape1["kpi_cost_usd_total"] > 0
    assert abs((scrape2["kpi_cost_usd_total"] - scrape1["kpi_cost_usd_total"]) - PRICE / 3600 * 1.2) \
        < PRICE / 3600 * 0.8
    meta = dict((r["key"], r["value"]) for r in _rows(db, "SELECT key, value FROM meta"))
    assert meta["energy_source"] == "rapl:package-0,dram-0", meta
    assert float(meta["price_per_hour"]) == PRICE and "token share" in meta["cost_method"]
    # the view, per minute: the requests' and idle cost add up to the intervals'
    v = _rows(db, "SELECT * FROM cost_per_minute")
    assert sum(r["requests"] for r in v) == len(_rows(db, "SELECT 1 FROM requests"))
    assert abs(sum((r["cost_usd"] or 0) + (r["idle_cost_usd"] or 0) for r in v) - total) < 1e-9
    assert abs(sum((r["energy_j"] or 0) + (r["idle_energy_j"] or 0) for r in v) - expect_total / 1e6) < 1e-6
    totals = [l for l in agent.lines if l.startswith("cost: ") and "sampled" in l]
    assert totals, agent.lines[-5:]
    print(f"     {totals[0]}")

    # kpi-report's section on the real trace: its figures are the rows'
    off = _rows(db, "SELECT mono_to_wall_ns AS o FROM agent_runs")[0]["o"]
    w = lambda ns: f"@{(ns + off) / 1e9:.6f}"
    rep = kpitest.run([os.path.join(kpitest.BIN, "kpi-report"), "--db", db, "--from", w(marks[2]),
                       "--to", w(marks[3]), "--baseline", f"{w(marks[0])}..{w(marks[1])}"], check=True).stdout
    row = [l for l in rep.splitlines() if l.startswith("| $ per 1M output tokens")]
    assert row and "Method: token share of batch steps" in rep, rep[-3000:]

    def mtok(lo, hi):
        # the report's windows: microsecond-rounded @times, requests by arrival
        lo, hi = int(round((lo + off) / 1e3)) * 1000 - off, int(round((hi + off) / 1e3)) * 1000 - off
        q = _rows(db, "SELECT TOTAL(machine_ns) AS m, TOTAL(output_tokens) AS n FROM requests "
                  "WHERE t_arrive_ns >= ? AND t_arrive_ns < ?", lo, hi)[0]
        idle = _rows(db, "SELECT TOTAL(idle_ns + unattributed_ns) AS i FROM cost_samples "
                     "WHERE t_ns > ? AND t_ns <= ?", lo, hi)[0]["i"]
        return f"{1e6 * PRICE * (q['m'] + idle) / 3.6e12 / q['n']:.4g}"
    cells = [c.strip() for c in row[0].split("|")]
    assert cells[2:4] == [mtok(marks[0], marks[1]), mtok(marks[2], marks[3])], (row, mtok(marks[0], marks[1]))
    print(f"     kpi-report: {row[0]}")


test_cost_attribution_exact_on_kpi_infer.timeout = 300


def _union_in(spans, t0, t1):
    """The length of the union of [a, b) spans within (t0, t1]."""
    cut = sorted((max(a, t0), min(b, t1)) for a, b in spans if min(b, t1) > max(a, t0))
    total, cur_a, cur_b = 0, None, None
    for a, b in cut:
        if cur_b is not None and a <= cur_b:
            cur_b = max(cur_b, b)
            continue
        if cur_b is not None:
            total += cur_b - cur_a
        cur_a, cur_b = a, b
    return total + (cur_b - cur_a if cur_b is not None else 0)


def _charged_from(r):
    """Where an HTTP row's time on the machine starts: its inferred start on
    the engine where a rule split it (its queue wait is not its own work),
    else its arrival (docs/cost.md, "Targets traced from their HTTP exchange")."""
    if r["split_rule"] is not None and r["t_sched_ns"] is not None and \
            r["t_arrive_ns"] <= r["t_sched_ns"] <= r["t_done_ns"]:
        return r["t_sched_ns"]
    return r["t_arrive_ns"]


def test_cost_http_only_target_by_time_in_flight():
    """kpi-infer traced from its HTTP exchange alone (--http-only: no steps):
    at 1 stream, then 8, every row gets its machine time, energy and cost;
    each interval's busy time is the union of the requests' times in flight
    as the rows give them, from the inferred start where a rule split the
    row (the test's own sweep); the requests' energy plus idle equals the
    counters' delta to the µJ and the cost price x duration; a request alone
    in flight gets its whole time, those at 8 streams share it, and none is
    charged for its inferred queue wait (docs/cost.md, "Targets traced from
    their HTTP exchange")."""
    pc, db, daemon, mport = _metered("http-cost.db", 4)
    agent = at.start_agent(db, "--http-only", "--flush-ms", 100, "--powercap-root", pc.root,
                           "--price-per-hour", PRICE, pid=daemon.p.pid)
    agent.wait_line(f"attached to pid {daemon.p.pid}", timeout=60)
    try:
        time.sleep(1.2)
        for threads in (1, 8):
            load = ft.Load(daemon.port, threads=threads, max_tokens=(8, 24), prefix=f"h{threads}-")
            time.sleep(3)
            res = load.stop()
            assert len(ft.completed(res)) >= 3, f"{threads} threads: {len(res)} requests"
            time.sleep(1.5)
    finally:
        pc.stop()
    time.sleep(1.2)
    assert agent.stop() == 0, agent.lines[-20:]
    rd = _rows(db, "SELECT * FROM energy_readings ORDER BY t_ns")
    expect = sum(pc.unwrapped(dom, max((r for r in rd if r["domain"] == dom), key=lambda r: r["t_ns"])["reading_uj"])
                 - pc.unwrapped(dom, min((r for r in rd if r["domain"] == dom), key=lambda r: r["t_ns"])["reading_uj"])
                 for dom in ("package-0", "dram-0"))
    iv = _rows(db, "SELECT * FROM cost_samples ORDER BY t_ns")
    reqs = _rows(db, "SELECT * FROM requests")
    assert reqs and all(r["source"] == "http" and r["seq_id"] is None for r in reqs), reqs[:2]
    missing = [r["request_id"] for r in reqs if r["machine_ns"] is None or r["energy_j"] is None
               or r["cost_usd"] is None]
    assert not missing, (len(missing), len(reqs), missing[:5], [l for l in agent.lines if l.startswith("cost:")])
    # every µJ and every dollar: to requests or idle
    req_uj = sum(_uj(r["energy_j"]) for r in reqs)
    idle_uj = sum(r["idle_energy_uj"] + r["unattributed_energy_uj"] for r in iv)
    assert sum(r["energy_uj"] for r in iv) == expect and req_uj + idle_uj == expect, (req_uj, idle_uj, expect)
    dur = iv[-1]["t_ns"] - iv[0]["t_ns"] + iv[0]["interval_ns"]
    total = sum(r["cost_usd"] for r in reqs) + sum(r["idle_cost_usd"] for r in iv)
    assert abs(total - PRICE * dur / 3.6e12) < 1e-9, (total, PRICE * dur / 3.6e12)
    # busy time: the union of the rows' spans, interval by interval
    spans = [(_charged_from(r), r["t_done_ns"]) for r in reqs]
    wrong = [(r["t_ns"], r["busy_ns"], _union_in(spans, r["t_ns"] - r["interval_ns"], r["t_ns"]))
             for r in iv if r["busy_ns"] != _union_in(spans, r["t_ns"] - r["interval_ns"], r["t_ns"])]
    assert not wrong, wrong[:5]
    assert sum(r["machine_ns"] for r in reqs) == sum(r["busy_ns"] for r in iv) and \
        all(r["unattributed_ns"] == 0 for r in iv)
    # alone in flight: its whole time; at 8 streams: shared
    alone = [r for r in reqs if r["request_id"].startswith("h1-") and not any(
        a < r["t_done_ns"] and b > _charged_from(r) for a, b in spans if (a, b) != (_charged_from(r), r["t_done_ns"]))]
    assert alone and all(r["machine_ns"] == r["t_done_ns"] - _charged_from(r) for r in alone), alone[:3]
    eight = [r["machine_ns"] / (r["t_done_ns"] - r["t_arrive_ns"]) for r in reqs if r["request_id"].startswith("h8-")]
    # rows a rule split: charged from their start on the engine, never for
    # the queue wait before it, and the exit line counts them
    split = [r for r in reqs if _charged_from(r) != r["t_arrive_ns"]]
    queued = [r for r in split if r["queue_ns"] and r["queue_ns"] > 0]
    assert split and all(r["machine_ns"] <= r["t_done_ns"] - r["t_sched_ns"] for r in split), split[:3]
    said = [l for l in agent.lines if l.startswith("cost: ") and "of them from the inferred split" in l]
    assert said and f"{len(split)} of them from the inferred split's start" in said[0], (len(split), said)
    meta = dict((r["key"], r["value"]) for r in _rows(db, "SELECT key, value FROM meta"))
    line = [l for l in agent.lines if l.startswith("cost: ") and "sampled" in l]
    print(f"     {len(reqs)} requests ({len(alone)} alone in flight, {len(split)} from an inferred start, "
          f"{len(queued)} of them after a queue wait), counters {expect} µJ = requests "
          f"{req_uj} + idle {idle_uj}; ${total:.9f} over {dur / 1e9:.3f} s; at 8 streams a request's "
          f"share of its time in flight: median {sorted(eight)[len(eight) // 2]:.3f}; {line}")
    assert eight and max(eight) <= 1 and sorted(eight)[len(eight) // 2] < 0.5, sorted(eight)
    assert "time in flight" in meta.get("cost_method_http", ""), meta
    # kpi-report names the method and an idle share that is the intervals'
    rep = kpitest.run([os.path.join(kpitest.BIN, "kpi-report"), "--db", db], check=True).stdout
    m = re.search(r"^\| idle share of the time % \|(?: [0-9.]+ \|)? ([0-9.]+) \|$", rep, re.M)
    assert "Method: time in flight shared by the requests in flight (from the inferred start on the engine " \
        "where a rule split the row)" in rep and m, rep[-3000:]
    assert float(m.group(1)) < 100, m.group(0)


test_cost_http_only_target_by_time_in_flight.timeout = 120


def test_cost_prometheus_rates_the_counters():
    """A real Prometheus scraping the agent: rate() of kpi_energy_joules_total
    is each domain's power as the test drives it (~50 W package, ~5 W dram),
    rate() of kpi_cost_usd_total the price per second, and with no load the
    idle energy is all of it."""
    import fleettest
    pc, db, daemon, mport = _metered("prom.db", 4)
    try:
        agent = _priced_agent(db, pc, daemon, mport)
        prom = fleettest.Prometheus([f"127.0.0.1:{mport}"])
        # the counters move once a sample: a window of 12 one-second scrapes
        # keeps a sample that comes late on a busy machine within the bounds
        time.sleep(16)
        watts = {dom: prom.scalar(f'rate(kpi_energy_joules_total{{domain="{dom}"}}[12s])')
                 for dom in ("package-0", "dram-0")}
        idle = prom.scalar("rate(kpi_energy_idle_joules_total[12s])")
        usd = prom.scalar("rate(kpi_cost_usd_total[12s])")
    finally:
        pc.stop()
    assert agent.stop() == 0, agent.lines[-20:]
    want = {"package-0": PKG_STEP / TICK / 1e6, "dram-0": DRAM_STEP / TICK / 1e6}
    print(f"     rate(): {watts} W (driven at {want}), idle {idle} W, {usd} USD/s "
          f"(price {PRICE / 3600} USD/s)")
    for dom, w in want.items():
        assert watts[dom] is not None and abs(watts[dom] - w) < 0.15 * w, (dom, watts[dom], w)
    assert usd is not None and abs(usd - PRICE / 3600) < 0.15 * PRICE / 3600, usd
    assert idle is not None and abs(idle - sum(want.values())) < 0.25 * sum(want.values()), idle


test_cost_prometheus_rates_the_counters.timeout = 120


def test_cost_no_counters_leaves_nulls():
    """No RAPL zone, no NVML: one line at start, meta says so, every energy
    figure NULL (never 0); without a price cost_usd is NULL too, machine time
    is still attributed."""
    ft.require()
    d = ft.workdir()
    empty = os.path.join(d, "no-powercap")
    os.makedirs(empty)
    db = os.path.join(d, "none.db")
    daemon = servertest.Daemon("--max-seqs", 4)
    mport = kpitest.free_port()
    agent = at.start_agent(db, "--flush-ms", 100, "--powercap-root", empty,
                           "--metrics", f"127.0.0.1:{mport}", pid=daemon.p.pid)
    said = [l for l in agent.lines if l.startswith("energy:")]
    assert len(said) == 1 and said[0].startswith(f"energy: not measured (no RAPL zone under {empty}"), \
        agent.lines
    load = ft.Load(daemon.port, threads=2, max_tokens=(4, 8))
    time.sleep(3)
    load.stop()
    time.sleep(2.2)
    metrics = kpitest.http_request(mport, "GET", "/metrics")[2].decode()
    assert agent.stop() == 0, agent.lines[-20:]
    assert "kpi_energy_joules_total" not in metrics and "kpi_cost_usd_total" not in metrics
    reqs = _rows(db, "SELECT energy_j, cost_usd, machine_ns FROM requests WHERE seq_id IS NOT NULL")
    assert reqs and all(r["energy_j"] is None and r["cost_usd"] is None for r in reqs)
    assert all(r["machine_ns"] is not None for r in reqs) and sum(r["machine_ns"] for r in reqs) > 0
    iv = _rows(db, "SELECT * FROM cost_samples")
    assert iv and all(r["energy_uj"] is None and r["idle_energy_uj"] is None and r["cost_usd"] is None
                      for r in iv)
    assert not _rows(db, "SELECT 1 FROM energy_readings")
    meta = dict((r["key"], r["value"]) for r in _rows(db, "SELECT key, value FROM meta"))
    assert meta["energy_source"].startswith("none: no RAPL zone under"), meta
    assert "price_per_hour" not in meta
    v = _rows(db, "SELECT * FROM cost_per_minute")
    assert v and all(r["energy_j"] is None and r["cost_usd"] is None for r in v), v


test_cost_no_counters_leaves_nulls.timeout = 120


def _nvml():
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return None, f"no GPU: libnvidia-ml.so.1 cannot be loaded ({e})"
    if lib.nvmlInit_v2() != 0:
        return None, "no GPU: nvmlInit failed"
    n = ctypes.c_uint()
    if lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) != 0 or not n.value:
        return None, "no GPU: NVML sees no device"
    return lib, None


def test_cost_gpu_nvml_counter():
    """On a GPU host: the agent reads each GPU's NVML energy counter (domain
    gpuN) while kpi-infer (--backend cuda) serves load and make bench-gpu runs;
    the requests' energy plus the idle line is the counters' delta."""
    lib, why = _nvml()
    if not lib:
        raise kpitest.Skip(why)
    ft.require()
    d = ft.workdir()
    db = os.path.join(d, "gpu.db")
    daemon = servertest.Daemon("--max-seqs", 8, "--backend", "cuda")
    agent = at.start_agent(db, "--flush-ms", 100, "--price-per-hour", 2, pid=daemon.p.pid)
    said = [l for l in agent.lines if l.startswith("energy:")]
    assert said and "nvml:gpu0" in said[0], agent.lines
    load = ft.Load(daemon.port, threads=4, max_tokens=(16, 32))
    bench = None
    if os.access(os.path.join(kpitest.BUILD, "cuda-attn-check"), os.X_OK):
        bench = kpitest.Proc(["make", "-C", kpitest.ROOT, "bench-gpu"])
    time.sleep(6)
    load.stop()
    if bench:
        bench.wait(timeout=600)
    time.sleep(2.2)
    assert agent.stop() == 0, agent.lines[-20:]
    rd = _rows(db, "SELECT * FROM energy_readings WHERE domain = 'gpu0' ORDER BY t_ns")
    assert len(rd) >= 5 and sum(r["delta_uj"] or 0 for r in rd) > 0, rd[:3]
    iv = _rows(db, "SELECT * FROM cost_samples")
    reqs = _rows(db, "SELECT energy_j FROM requests WHERE seq_id IS NOT NULL")
    req_uj = sum(_uj(r["energy_j"]) for r in reqs)
    assert req_uj + sum(r["idle_energy_uj"] + r["unattributed_energy_uj"] for r in iv) == \
        sum(r["energy_uj"] for r in iv)
    gpu_j = sum(r["delta_uj"] or 0 for r in rd) / 1e6
    print(f"     gpu0: {gpu_j:.3f} J over {len(rd)} readings, {len(reqs)} requests")


test_cost_gpu_nvml_counter.timeout = 700


S = 10**9


def _synthetic(d):
    """A v5 trace of 4 minutes (tracetest's traffic) with cost rows: the
    baseline minute runs batches of 12 with 10% idle, the incident minute
    [120 s, 180 s) a quarter of the requests in batches of 3, 70% idle, an
    empty queue. Returns (path, open connection, baseline, incident)."""
    import tracetest as tt
    db_path = os.path.join(d, "cost-synth.db")
    db = tt.generate(db_path, duration_s=240, rate=20.0, seed=7)
    tt.migrate(db)
    base, inc = (tt.T0, tt.T0 + 60 * S), (tt.T0 + 120 * S, tt.T0 + 180 * S)
    db.execute("DELETE FROM requests WHERE t_arrive_ns >= ? AND t_arrive_ns < ? AND seq_id % 4 != 0", inc)
    db.execute("UPDATE steps SET decode_seqs = 12 WHERE t_start_ns >= ? AND t_start_ns < ?", base)
    db.execute("UPDATE steps SET decode_seqs = 3 WHERE t_start_ns >= ? AND t_start_ns < ?", inc)
    db.execute("UPDATE samples SET queue_depth = 0 WHERE t_ns >= ? AND t_ns < ?", (inc[0], inc[1] + 10 * S))
    db.execute("UPDATE requests SET machine_ns = output_tokens * 400000, "
               "energy_j = output_tokens * 0.02, cost_usd = output_tokens * 400000 * 2.0 / 3.6e12")
    rows = []
    for sec in range(240):
        t = tt.T0 + (sec + 1) * S
        idle = int(0.7 * S) if inc[0] < t <= inc[1] else int(0.1 * S)
        rows.append((t + tt.WALL0 - tt.T0, t, S, S - idle, idle, 0, 20, 50, 50_000_000,
                     idle // 20, 0, 2.0, 2.0 / 3600, 2.0 * idle / 3.6e12))
    db.executemany("INSERT INTO cost_samples (run_id, wall_ns, t_ns, interval_ns, busy_ns, idle_ns, "
                   "unattributed_ns, steps, step_tokens, energy_uj, idle_energy_uj, "
                   "unattributed_energy_uj, price_per_hour, cost_usd, idle_cost_usd) "
                   "VALUES (1,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                   [("price_per_hour", "2"), ("energy_source", "rapl:package-0"),
                    ("cost_method", "token share of batch steps")])
    db.commit()
    return db_path, db, base, inc


def _synth_figures(db, lo, hi, price):
    """$ per 1M output tokens and J per output token, idle included, of the
    requests that arrived in [lo, hi) and the intervals that ended in it."""
    r = db.execute("SELECT TOTAL(machine_ns), TOTAL(output_tokens), TOTAL(energy_j) FROM requests "
                   "WHERE t_arrive_ns >= ? AND t_arrive_ns < ?", (lo, hi)).fetchone()
    idle, idle_uj = db.execute("SELECT TOTAL(idle_ns + unattributed_ns), "
                               "TOTAL(idle_energy_uj + unattributed_energy_uj) FROM cost_samples "
                               "WHERE t_ns > ? AND t_ns <= ?", (lo, hi)).fetchone()
    return 1e6 * price * (r[0] + idle) / 3.6e12 / r[1], (r[2] + idle_uj / 1e6) / r[1]


def test_cost_report_section_and_underuse_finding():
    """kpi-report's cost section on a synthetic v5 trace: the figures match
    the rows, --price-per-hour overrides the agent's, and a window whose batch
    fell from 12 to 3 with an empty queue and a quarter of the traffic gets
    the under-utilisation finding."""
    import tracetest as tt
    tt.require(tt.REPORT, "kpi-report")
    d = kpitest.tmpdir()
    db_path, db, base, inc = _synthetic(d)

    def usd_per_mtok(lo, hi, price):
        return _synth_figures(db, lo, hi, price)[0]

    def at(ns):
        return f"@{(ns + tt.WALL0 - tt.T0) / 1e9:.3f}"

    argv = [tt.REPORT, "--db", db_path, "--from", at(inc[0]), "--to", at(inc[1]),
            "--baseline", f"{at(base[0])}..{at(base[1])}"]
    out = kpitest.run(argv, check=True).stdout
    assert "## Cost and energy" in out and "Method: token share of batch steps" in out, out
    assert "Price: $2 an hour (the agent's --price-per-hour). Energy: rapl:package-0." in out, out
    row = [l for l in out.splitlines() if l.startswith("| $ per 1M output tokens")][0]
    want = (f"{usd_per_mtok(*base, 2.0):.4g}", f"{usd_per_mtok(*inc, 2.0):.4g}")
    assert row.split("|")[2].strip() == want[0] and row.split("|")[3].strip() == want[1], (row, want)
    m = re.search(r"\*\*Cost per token rose (\d+)%: batch size fell from (\S+) to (\S+) while the queue "
                  r"stayed empty\*\* — phase: \*\*decode\*\*; cause: \*\*under-utilisation\*\*", out)
    assert m, out[:3000]
    rise = usd_per_mtok(*inc, 2.0) / usd_per_mtok(*base, 2.0) - 1
    assert int(m.group(1)) == round(rise * 100), (m.group(1), rise)
    assert 12 <= float(m.group(2)) < 13 and 3 <= float(m.group(3)) < 4, m.groups()
    assert "under-utilisation, not load" in out
    out4 = kpitest.run(argv + ["--price-per-hour", "4"], check=True).stdout
    row4 = [l for l in out4.splitlines() if l.startswith("| $ per 1M output tokens")][0]
    assert row4.split("|")[3].strip() == f"{usd_per_mtok(*inc, 4.0):.4g}", row4
    assert "Price: $4 an hour (--price-per-hour)" in out4
    html = kpitest.run(argv + ["--format", "html"], check=True).stdout
    assert "<h2>Cost and energy</h2>" in html and "Cost per token rose" in html
    # a trace before version 5 says why the section is empty
    old = os.path.join(d, "v1.db")
    tt.generate(old, duration_s=240, rate=20.0, seed=7).close()
    out_old = kpitest.run([tt.REPORT, "--db", old, "--from", at(inc[0]), "--to", at(inc[1]),
                           "--baseline", f"{at(base[0])}..{at(base[1])}"], check=True).stdout
    assert "## Cost and energy\n\nNot shown:" in out_old and "before schema version 5" in out_old, out_old
    db.close()


def test_cost_kpitop_meter():
    """kpitop's cost meter over its window: $ per 1M output tokens and J per
    token (idle included) as the rows say, the idle share, the method named;
    --price-per-hour overrides the agent's price."""
    import tracetest as tt
    tt.require(tt.KPITOP, "kpitop")
    d = kpitest.tmpdir()
    db_path, db, base, inc = _synthetic(d)
    at = f"@{(inc[1] + tt.WALL0 - tt.T0) / 1e9:.3f}"
    for price, flags in ((2.0, []), (5.0, ["--price-per-hour", "5"])):
        out = tt.run_tool([tt.KPITOP, "--db", db_path, "--once", "--width", "160", "--window", "60s",
                           "--at", at, *flags]).stdout
        m = re.search(r"\$/1M tok (\S+)\s+J/tok (\S+)\s+W (\S+)\s+idle (\d+)%\s+\((.*)\)", out)
        assert m, out
        win = re.search(r"^window \[(-?\d+), (-?\d+)\)", out, re.M)
        lo, hi = int(win.group(1)), int(win.group(2))
        usd, jpt = _synth_figures(db, lo, hi, price)
        assert m.group(1) == f"{usd:.4g}" and m.group(2) == f"{jpt:.4g}", (m.groups(), usd, jpt)
        assert int(m.group(4)) == 70, m.group(4)
        assert "token share of batch steps, idle apart (docs/cost.md)" in m.group(5), m.group(5)
        assert ("agent's" in m.group(5)) == (not flags), m.group(5)
    # a trace without cost tables says so instead of showing zeros
    old = os.path.join(d, "v1.db")
    tt.generate(old, duration_s=60, rate=5.0).close()
    out = tt.run_tool([tt.KPITOP, "--db", old, "--once", "--width", "160"]).stdout
    assert "cost: not in this window" in out and "$/1M tok" not in out, out
    db.close()
