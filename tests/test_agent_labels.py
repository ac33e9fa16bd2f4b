"""Bounded, honest /metrics labels (issue 29), for real: root, real BPF, real
servers.  A process's `gen_ai_request_model` is its own (the model file it
serves), or for a server seen only on the wire the first model its requests
named: it never follows the last request (another model on a multi-model
server, nothing after a GET with no body), since clients choose that value.
What each request named is a label of its own, `kpi_request_model`, at most
PROM_REQUEST_MODELS values a process and the rest counted under `other`;
a request that named none has none."""
import http.client, json, os, sys, time, urllib.request

import kpitest
import promtext
import agenttest as at
import fleettest as ft
import servertest

SERVER = os.path.join(kpitest.ROOT, "tests", "lib", "sse_server.py")
PROM_REQUEST_MODELS = 8     # agent/sinks/export_prom.c


def _metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return promtext.by_labels(r.read().decode())


def _labels(m, name, pid):
    """The label sets of metric name's series of pid."""
    return [dict(labels) for (n, labels), _ in m.items() if n == name and dict(labels).get("pid") == str(pid)]


def _post(port, rid, model):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = {"max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    if model:
        body["model"] = model
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json", "x-request-id": rid})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def test_metrics_model_labels_are_bounded():
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)
    servertest.require_binary()
    d = kpitest.tmpdir("kpi-agent-labels-")
    db = os.path.join(d, "labels.db")
    daemon = servertest.Daemon()
    port, mport = kpitest.free_port(), kpitest.free_port()
    srv = kpitest.Proc([sys.executable, SERVER, str(port)])
    srv.wait_line("listening on")
    agent = at.start_agent(db, "--flush-ms", 100, "--pid", daemon.p.pid, "--port", port,
                           "--metrics", f"127.0.0.1:{mport}")
    agent.wait_line(f"attached to pid {srv.pid}", timeout=60)
    agent.wait_line(f"attached to pid {daemon.p.pid}", timeout=60)

    # the wire-only server: 12 models, 2 requests each, then one naming none
    # and a GET with no body
    models = [f"model-{k:02d}" for k in range(12)]
    for k, mdl in enumerate(models * 2):
        assert _post(port, f"lab-{k}", mdl) == 200
    assert _post(port, "lab-none", None) == 200
    assert kpitest.http_request(port, "GET", "/health", headers={"x-request-id": "lab-get"})[0] == 200
    # kpi-infer, asked for a model by a name that is not its own
    st, _, _ = kpitest.http_request(daemon.port, "POST", "/v1/completions",
                                    body={"model": "someone-elses-model", "prompt": "hi", "max_tokens": 2},
                                    headers={"x-request-id": "lab-infer"})
    assert st == 200
    rows_wanted = {f"lab-{k}" for k in range(24)} | {"lab-none", "lab-get", "lab-infer"}
    servertest.wait_for(lambda: rows_wanted <= set(at.rows(db)), timeout=30, what="the rows")
    time.sleep(0.3)
    m = _metrics(mport)
    assert agent.stop() == 0, agent.lines[-20:]

    name = "gen_ai_server_request_duration_seconds_count"
    srv_series = _labels(m, name, srv.pid)
    assert srv_series, sorted({n for n, _ in m})[:40]
    # the process's label: the first model its requests named, on every series
    assert {s.get("gen_ai_request_model") for s in srv_series} == {models[0]}, srv_series
    for fam in ("kpi_requests_total", "gen_ai_server_time_to_first_token_seconds_count"):
        assert {s.get("gen_ai_request_model") for s in _labels(m, fam, srv.pid)} <= {models[0]}, fam
    # what each request named: capped, the rest under "other", none where none was named
    count = {}
    for (n, labels), v in m.items():
        labels = dict(labels)
        if n == name and labels.get("pid") == str(srv.pid):
            k = labels.get("kpi_request_model", "")
            count[k] = count.get(k, 0) + v
    want = {mdl: 2 for mdl in models[:PROM_REQUEST_MODELS]}
    want["other"] = 2 * (len(models) - PROM_REQUEST_MODELS)
    want[""] = 2        # the request that named no model, and the GET
    assert count == want, count
    # kpi-infer: the model file's name, whatever a request asks for
    infer = _labels(m, name, daemon.p.pid)
    own = daemon.json("GET", "/v1/models")[2]["data"][0]["id"]
    assert infer and {s.get("gen_ai_request_model") for s in infer} == {own}, infer
    print(f"     wire-only server: gen_ai_request_model {models[0]!r} on all its series; "
          f"kpi_request_model {sorted(count)} ; kpi-infer: {own!r}")
