"""Short libFuzzer runs (tests/fuzz/, issue 11): each target ~5 s from its seed
corpus, failing on any crash, leak, UBSan report or assertion and printing the
reproducer. `make fuzz FUZZ_S=N` runs the same targets longer."""
import os, sys

import kpitest

sys.path.insert(0, os.path.join(kpitest.ROOT, "tests", "fuzz"))
import run as fuzzrun  # noqa: E402

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True

SECONDS = int(os.environ.get("KPI_FUZZ_S", "5"))


def fuzz(name):
    binary = os.path.join(fuzzrun.FUZZ, f"fuzz_{name}")
    if not os.access(binary, os.X_OK):
        raise kpitest.Skip(f"{binary} is not built (make test builds it; needs clang and "
                           "libclang-rt-14-dev: make deps)")
    ok, summary, repro, tail = fuzzrun.run_target(name, SECONDS)
    print(f"     {summary}")
    assert ok, (f"fuzz target {name} failed: {summary}\n{tail}\n"
                + (f"reproducer: {repro}\nreplay: {binary} {repro}" if repro else
                   "no reproducer written (timeout or startup failure)"))


def test_fuzz_http():
    fuzz("http")


def test_fuzz_json():
    fuzz("json")


def test_fuzz_chat():
    fuzz("chat")


def test_fuzz_gguf():
    fuzz("gguf")


def test_fuzz_agent_http_track():
    fuzz("agent_http_track")


def test_fuzz_agent_http2():
    """HTTP/2 frames and gRPC messages (tests/fuzz/fuzz_agent_http2.c): bad
    lengths, HPACK bombs, CONTINUATION floods, RST storms, lying gRPC prefixes."""
    fuzz("agent_http2")


for _t in (test_fuzz_http, test_fuzz_json, test_fuzz_chat, test_fuzz_gguf, test_fuzz_agent_http_track,
           test_fuzz_agent_http2):
    _t.timeout = SECONDS + 90


def test_fuzz_kv_wire():
    fuzz("kv_wire")
