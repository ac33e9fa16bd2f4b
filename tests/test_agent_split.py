"""The engine split kpi-agent infers from stream timing (issue 33, docs/agent.md
"The inferred split"), as root, against the truth of the servers that know it:
tests/lib/batch_server.py and the vLLM-shaped tests/lib/vllm_server.py (their
own logs), kpi-infer (a second agent through its
USDT probes), node-llama-cpp (a second agent through llama_decode); and a server
that buffers its writes, where the agent must decline.  The same load is traced
as a black box (--http-only) and compared request by request (splittest.py).

The targets, at 4 or more concurrent streams: a split for at least 80% of the
streamed rows, and prefill within max(20%, 2 ms) of the truth for 90% of those.
The share is counted among the rows around whose prompt the server met the rules'
assumption (each step's tokens written within 30% of a step after it ended, which
splittest.py measures from the server's own marks, over the whole window the agent
judges the row by: 8 decode steps either side, 100 ms to 2 s): on this shared 2-core
machine a server starved of CPU writes late, the agent rightly declines there,
and the share of all rows (printed) measures the machine as much as the rules.
The closed loop's first round (as many requests as streams, reaching an idle
engine at once) is left out as a warm-up."""
import tempfile

import kpitest
import agenttest as at
import splittest as st

SHARE, WITHIN = 0.8, 0.9        # the targets
MIN_ROWS = 20                   # fewer rows than this decide no share
# requests per stream of the batch server's cases: 12 rounds after the
# warm-up give every case at least 2.4x MIN_ROWS rows (c4: 48)
PER_STREAM = 13


def _tmp():
    d = tempfile.mkdtemp(prefix="kpi-split-")
    kpitest.on_cleanup(lambda: __import__("shutil").rmtree(d, True))
    return d


def _require():
    kpitest.require_root("kpi-agent")
    at.require_built(at.AGENT)


def _report(name, e):
    met = f"{e['share_met']:.0%} of {e['met']} met" if e.get("share_met") is not None else "-"
    print(f"     {name}: {e['inferred']} of {e['n']} split ({e['share']:.0%}; {met}), rules "
          f"{e['rules']}; queue error ms {e['queue_ms']}, prefill error ms {e['prefill_ms']}, "
          f"{e['within']:.0%} within (queue {e['within_queue']:.0%}); {e['agent']}")


def _check_targets(name, e):
    """The targets where the case has enough rows to decide them."""
    bad = []
    if e.get("met", 0) >= MIN_ROWS and e["share_met"] < SHARE:
        bad.append(f"{name}: split for {e['share_met']:.0%} of the {e['met']} rows whose server met "
                   f"the assumptions (target {SHARE:.0%})")
    if e["inferred"] >= MIN_ROWS and e["within"] < WITHIN:
        bad.append(f"{name}: prefill within max(20%, 2 ms) for {e['within']:.0%} of {e['inferred']} "
                   f"(target {WITHIN:.0%})")
    return bad


def test_agent_split_batch_server():
    """A vLLM-like continuous-batching server, whole prompts and chunked ones
    (512 tokens a step), 4 to 16 streams at once: the targets hold."""
    _require()
    bad = []
    for c, args in ((4, []), (8, []), (16, []), (4, ["--chunked", "--token-budget", 512]),
                    (8, ["--chunked", "--token-budget", 512])):
        name = f"batch_server {'chunked' if args else 'whole prompts'} c{c}"
        e = st.run_batch(_tmp(), c, PER_STREAM * c, *args)
        _report(name, e)
        assert e["n"] >= 0.9 * (PER_STREAM - 1) * c, (name, e["n"])
        bad += _check_targets(name, e)
        kpitest.cleanup()
    assert not bad, bad


test_agent_split_batch_server.timeout = 900


def _check_queue(name, e):
    """The issue-48 target on queue as on prefill."""
    if e["inferred"] >= MIN_ROWS and e["within_queue"] < WITHIN:
        return [f"{name}: queue within max(20%, 2 ms) for {e['within_queue']:.0%} of "
                f"{e['inferred']} (target {WITHIN:.0%})"]
    return []


def test_agent_split_vllm_server():
    """tests/lib/vllm_server.py, vLLM-shaped: an asyncio engine loop, 6
    running sequences at most and 8 streams, so requests queue for a slot
    while the steps around them are lengthened by the prompts of those
    admitted before them; whole prompts (each stalls its step) and chunked
    (256 tokens a step), prompts of 10 to 600 tokens (2 to 120 words).  Those
    lengthened steps are not counted as the queued request's prefill (the
    split issue 48 found 17% right): the targets hold on queue and prefill."""
    _require()
    bad = []
    for args in ([], ["--chunked", "--token-budget", 256]):
        name = f"vllm_server {'chunked' if args else 'whole prompts'} c8"
        e = st.run_batch(_tmp(), 8, PER_STREAM * 8, *args, script="vllm_server.py", longest=600,
                         shortest=10)
        _report(name, e)
        assert e["n"] >= 0.9 * (PER_STREAM - 1) * 8, (name, e["n"])
        if e.get("met", 0) >= MIN_ROWS:
            # queued for a slot: the case this test is for
            assert sum(d[4] > 20e6 for d in e["detail"]) >= MIN_ROWS // 2, (name, "few queued")
        bad += _check_targets(name, e) + _check_queue(name, e)
        kpitest.cleanup()
    assert not bad, bad


test_agent_split_vllm_server.timeout = 300


def test_agent_split_declines_buffered_writes():
    """A server that writes a stream's tokens together every 20 ms, not as its
    engine emits them: no row gets a split, each is declined as buffered."""
    _require()
    e = st.run_batch(_tmp(), 8, 64, "--buffer-ms", 20)
    _report("batch_server --buffer-ms 20 c8", e)
    assert e["n"] >= 50 and e["inferred"] == 0, e["rules"]
    assert "64 declined (64 buffered)" in e["agent"], e["agent"]


test_agent_split_declines_buffered_writes.timeout = 300


def test_agent_split_declines_speculative_decoding():
    """Events of up to 4 tokens each (speculative decoding): declined."""
    _require()
    e = st.run_batch(_tmp(), 8, 64, "--spec", 4)
    _report("batch_server --spec 4 c8", e)
    assert e["n"] >= 50 and e["inferred"] <= 0.05 * e["n"], e["rules"]
    assert "multi_token" in e["agent"], e["agent"]


test_agent_split_declines_speculative_decoding.timeout = 300


def test_agent_split_kpi_infer():
    """kpi-infer (the small preset, whose steps are a GPU's order of size,
    tens of ms) under 8 streams, whole prompts and a 256-token budget, traced
    at once through its USDT probes (the truth) and with --http-only."""
    _require()
    at.require_built(at.INFER)
    bad = []
    for chunked in (False, True):
        name = f"kpi-infer small {'chunked' if chunked else 'whole prompts'} c8"
        e = st.run_kpi(_tmp(), 8, 48, chunked, "small")
        _report(name, e)
        assert e["n"] >= 36, (name, e["n"])
        bad += _check_targets(name, e)
        kpitest.cleanup()
    assert not bad, bad


test_agent_split_kpi_infer.timeout = 1200


def test_agent_split_llama_cpp():
    """node-llama-cpp, whose four sequences mostly decode in separate
    llama_decode calls (not one step for all): the agent declines where the
    streams do not keep one engine's pace, and the splits it does give are
    right (libllama's marks the truth)."""
    _require()
    import llamatest
    llamatest.require()
    e = st.run_llama(_tmp(), 4, 80)
    _report("node-llama-cpp c4", e)
    assert e["n"] >= 66, e["n"]
    assert e["inferred"] < MIN_ROWS or e["within"] >= WITHIN, e
    assert "pace" in e["agent"] or "participation" in e["agent"], e["agent"]


test_agent_split_llama_cpp.timeout = 600
