"""Synthetic kpi-agent traces for the fleet's tests and benchmark: one SQLite
trace per host, written with the agent's own schema files, requests with
phases that add up to e2e and a sample a second; an optional slowdown of one
phase on one host from a given time on; optional 429s, errors and losses."""
import glob, os, random, sqlite3

import kpitest

SCHEMA = sorted(glob.glob(os.path.join(kpitest.ROOT, "schema", "0*.sql")))
MS = 1_000_000


def make_trace(path, host, n, start_wall_ns, span_s, seed=1, slow_from_s=None, slow_phase="queue_ns",
               slow_ms=200, model="tiny", reject_every=0, error_every=0, losses=(), pods=(), slow_pod=None):
    """n requests arriving evenly over span_s seconds from start_wall_ns; from
    slow_from_s on, slow_phase takes slow_ms more. Every reject_every-th
    request is a 429 (no TTFT, TPOT or e2e), every error_every-th a 500 with
    finish_reason error (its TTFT kept); losses: (second, cause, n) rows.
    pods: "NAMESPACE/NAME"s the requests run in, in turn (none, or a None
    among them: on the host); slow_pod: the index of the only pod slowed."""
    for f in glob.glob(path + "*"):
        os.remove(f)
    db = sqlite3.connect(path)
    for f in SCHEMA:
        db.executescript(open(f).read())
    db.execute(f"PRAGMA user_version = {len(SCHEMA)}")
    db.execute("PRAGMA journal_mode=WAL")
    offset = start_wall_ns - 1_000 * 10**9      # the host's monotonic clock runs 1000 s behind
    db.execute("INSERT INTO agent_runs(run_id, started_wall_ns, mono_to_wall_ns, hostname) VALUES (1, ?, ?, ?)",
               (start_wall_ns, offset, host))
    rnd = random.Random(seed)
    rows = []
    step = span_s * 10**9 // max(n, 1)
    for i in range(n):
        wall = start_wall_ns + i * step
        t = wall - offset
        ph = {"net_in_ns": rnd.randint(50_000, 200_000), "queue_ns": rnd.randint(0, 5 * MS),
              "prefill_ns": rnd.randint(5 * MS, 20 * MS), "decode_ns": rnd.randint(20 * MS, 80 * MS),
              "net_out_ns": rnd.randint(20_000, 100_000)}
        pod = pods[i % len(pods)].split("/", 1) if pods and pods[i % len(pods)] else (None, None)
        if slow_from_s is not None and (wall - start_wall_ns) >= slow_from_s * 10**9 and \
                (slow_pod is None or i % len(pods) == slow_pod):
            ph[slow_phase] += slow_ms * MS
        first_write = t + ph["net_in_ns"] + ph["queue_ns"] + ph["prefill_ns"] + 30_000
        e2e = sum(ph.values())
        out = rnd.randint(4, 32)
        prompt = rnd.randint(10, 60)
        if reject_every and i % reject_every == reject_every - 1:
            rows.append((f"{host}-{i}", 1000, None, 1, wall, t, t + ph["net_in_ns"], None, None, None, None,
                         t + ph["net_in_ns"] + 20_000, ph["net_in_ns"], None, None, None, 20_000, None, None, None,
                         prompt, 0, 429, None, 0, "usdt", model, *pod))
            continue
        status, finish = (500, "error") if error_every and i % error_every == error_every - 1 else (200, "stop")
        rows.append((f"{host}-{i}", 1000, i, 1, wall, t, t + ph["net_in_ns"], t + ph["net_in_ns"] + ph["queue_ns"],
                     t + ph["net_in_ns"] + ph["queue_ns"] + ph["prefill_ns"],
                     t + e2e - ph["net_out_ns"], first_write, t + e2e, ph["net_in_ns"], ph["queue_ns"],
                     ph["prefill_ns"], ph["decode_ns"], ph["net_out_ns"], first_write - t,
                     ph["decode_ns"] // max(out - 1, 1), e2e, prompt, out, status, finish, 0, "usdt", model, *pod))
    db.executemany("INSERT INTO requests(request_id, pid, seq_id, run_id, wall_ns, t_arrive_ns, t_admit_ns, "
                   "t_sched_ns, t_first_ns, t_last_ns, t_first_write_ns, t_done_ns, net_in_ns, queue_ns, prefill_ns, "
                   "decode_ns, net_out_ns, ttft_ns, tpot_ns, e2e_ns, prompt_tokens, output_tokens, http_status, "
                   "finish_reason, preemptions, source, model, pod_namespace, pod_name) VALUES (" +
                   ",".join("?" * 29) + ")", rows)
    samples = [(1000, 1, start_wall_ns + s * 10**9, start_wall_ns + s * 10**9 - offset, 0, 1, n / span_s, 0.0, 0, 0, 0, 0)
               for s in range(span_s + 1)]
    db.executemany("INSERT INTO samples(pid, run_id, wall_ns, t_ns, queue_depth, running, requests_per_s, "
                   "output_tokens_per_s, preemptions, rejections, errors, drops) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                   samples)
    db.executemany("INSERT INTO losses(run_id, wall_ns, t_ns, cause, n) VALUES (1, ?, ?, ?, ?)",
                   [(start_wall_ns + sec * 10**9, start_wall_ns + sec * 10**9 - offset, cause, k)
                    for sec, cause, k in losses])
    db.commit()
    db.close()
