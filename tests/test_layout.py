"""make check-layout: the tree as committed keeps the arrows between folders
and between the agent's stages and has no circle between files; a copy of it
with one crossing include, a file agent/ has no place for, an include circle,
or two objects that call each other is refused, file and line named."""
import os, shutil, subprocess, sys

import kpitest

# tests/run.py runs these beside other tests, but those marked alone: none
# of them times anything or counts what the whole host did.
CONCURRENT = True

CHECK = os.path.join(kpitest.ROOT, "tests", "check_layout.py")
FOLDERS = ("abi", "agent", "bpf", "cupti", "daemon", "schema", "tools")


def run_check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=120)


def copy_tree():
    d = kpitest.tmpdir()
    for f in FOLDERS:
        shutil.copytree(os.path.join(kpitest.ROOT, f), os.path.join(d, f))
    return d


def add_include(root, rel, include):
    """Puts `#include "include"` after the first line of rel; returns its line number."""
    path = os.path.join(root, rel)
    lines = open(path).read().split("\n")
    lines.insert(1, f'#include "{include}"')
    open(path, "w").write("\n".join(lines))
    return 2


def test_tree_keeps_the_arrows():
    p = run_check(kpitest.ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    # make test builds first: the call circles were read from the objects
    assert "not checked" not in p.stderr, p.stderr


def test_crossing_includes_are_named_with_file_and_line():
    cases = [
        ("daemon/server/http.h", "bpf/kpi_event.h"),       # daemon -> bpf
        ("bpf/kpi_gpu_event.h", "cupti/convert.h"),        # bpf -> cupti
        ("agent/track/assemble.c", "daemon/engine.h"),     # agent -> daemon
        ("abi/kpi_reasons.h", "bpf/kpi_event.h"),          # abi -> anything
        ("tools/kpitop/main.c", "agent/record.h"),         # tools -> agent
        ("tools/kpi-report/main.c", "tools/kpitop/kpitop.h"),  # one tool -> another
        ("cupti/injection.c", "kpi.skel.h"),               # generated header of bpf/
        # the agent's stages: main -> sources -> track -> sinks -> host, record.h for all
        ("agent/sinks/store.c", "agent/track/assemble.h"),     # a sink knows no tracker
        ("agent/sinks/export_prom.c", "agent/sources/gpu.h"),  # ... nor a source
        ("agent/track/hop_link.c", "agent/sources/loader.h"),  # track knows no source
        ("agent/host/targets.c", "agent/sinks/store.h"),       # host knows no stage
        ("agent/record.h", "agent/track/bus.h"),               # the record type knows none
        ("agent/sources/tls.c", "agent/main.c"),               # nothing includes main
        # the HTTP tracker knows nothing of BPF, pids, fds, or the agent
        ("agent/track/http/http_json.c", "bpf/kpi_event.h"),
        ("agent/track/http/http_sse.c", "agent/record.h"),
        ("agent/track/http/http_track.c", "agent/track/bus.h"),
        # daemon/pd/: the server's top calls it through pd.h alone; it stands on the
        # server's base, never its top; that base knows nothing of it
        ("daemon/server/server.c", "daemon/pd/router.h"),       # past the door
        ("daemon/server/fanout.c", "daemon/pd/kv_wire.h"),      # past the door
        ("daemon/pd/kv_fetch.c", "daemon/server/generate.h"),   # pd -> the server's top
        ("daemon/pd/router.c", "daemon/server/server.h"),       # ... the top's own header
        ("daemon/server/conn.c", "daemon/pd/pd.h"),             # the base -> pd
        ("daemon/server/openai.c", "daemon/pd/pd.h"),           # ... what the base includes
        ("daemon/engine/kv.c", "daemon/pd/kv_wire.h"),          # only server/ calls pd/
    ]
    for rel, inc in cases:
        root = copy_tree()
        line = add_include(root, rel, inc)
        p = run_check(root)
        assert p.returncode == 1, f"{rel} -> {inc} was accepted:\n{p.stdout}{p.stderr}"
        lines = p.stdout.splitlines()
        assert lines and lines[0].startswith(f"{rel}:{line}: includes \"{inc}\""), p.stdout
        # a crossing can close a circle too (track -> sources, sources -> track): said apart
        assert all(l == lines[0] or "circle of includes" in l for l in lines), p.stdout


def test_allowed_includes_pass_in_a_copy():
    root = copy_tree()
    for rel, inc in [("agent/track/assemble.c", "abi/kpi_step_seq.h"), ("agent/main.c", "schema/trace_path.h"),
                     ("tools/kpitop/main.c", "tools/common/trace.h"), ("agent/track/assemble.c", "schema/pct.h"),
                     ("daemon/engine/kv.c", "abi/kpi_step.h"),
                     ("agent/main.c", "agent/track/http/http_track.h"),     # main sees every stage
                     ("agent/sources/llama.c", "agent/sinks/store.h"),      # an earlier stage a later one
                     ("agent/track/gpu_attr.c", "agent/host/elf.h"),        # every stage host/
                     ("agent/host/elf.c", "agent/record.h"),                # every stage record.h
                     ("agent/track/llama_join.c", "agent/track/http/http_json.h"),  # track its own tracker
                     ("daemon/server/main.c", "daemon/pd/pd.h"),            # the server's top: the door
                     ("daemon/pd/route_policy.c", "daemon/server/sbuf.h")]:  # pd: the server's base
        add_include(root, rel, inc)
    p = run_check(root)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_file_agent_has_no_place_for_is_refused():
    for rel in ("agent/helpers.c", "agent/parsers/grpc.c"):
        root = copy_tree()
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as f:
            f.write("/* x */\nint helper(void) { return 0; }\n")
        p = run_check(root)
        assert p.returncode == 1 and p.stdout.startswith(f"{rel}:1: agent/ has no place for this file"), \
            p.stdout + p.stderr


def test_include_circle_is_named():
    """http_path.c including assemble.h again (the circle issue 28 removed):
    both may see each other, but not both ways round."""
    root = copy_tree()
    line = add_include(root, "agent/track/http_path.c", "agent/track/assemble.h")
    p = run_check(root)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1 and "circle of includes" in lines[0], p.stdout
    assert f"agent/track/http_path.c:{line} includes agent/track/assemble.h" in lines[0], p.stdout
    assert "agent/track/assemble.c:" in lines[0] and "includes agent/track/http_path.h" in lines[0], p.stdout


def test_call_circle_is_named_from_the_objects():
    """Two files of a tool that call each other without including each other's
    header (as kpi-bench's html.c and sweep.c did through bench.h): only their
    objects show it."""
    root = copy_tree()
    src = {"tools/kpi-bench/ring_a.c": "int ring_b(int);\nint ring_a(int n) { return n ? ring_b(n - 1) : 0; }\n",
           "tools/kpi-bench/ring_b.c": "int ring_c(int);\nint ring_b(int n) { return ring_c(n); }\n",
           "tools/kpi-bench/ring_c.c": "int ring_a(int);\nint ring_c(int n) { return ring_a(n); }\n"}
    for rel, text in src.items():
        with open(os.path.join(root, rel), "w") as f:
            f.write("/* a file of a call circle */\n" + text)
        obj = os.path.join(root, "build", "obj", rel[:-2] + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(["gcc", "-c", os.path.join(root, rel), "-o", obj], check=True, timeout=60)
    p = run_check(root)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1, p.stdout
    assert lines[0].startswith("tools/kpi-bench/ring_a.c: circle of calls "), p.stdout
    for a, b in (("ring_a", "ring_b"), ("ring_b", "ring_c"), ("ring_c", "ring_a")):
        assert f"tools/kpi-bench/{a}.c calls {b} (tools/kpi-bench/{b}.c)" in lines[0], p.stdout
    # an object older than its source says nothing about it now
    os.utime(os.path.join(root, "tools/kpi-bench/ring_c.c"))
    os.utime(os.path.join(root, "build/obj/tools/kpi-bench/ring_c.o"), (1, 1))
    p = run_check(root)
    assert p.returncode == 0, p.stdout + p.stderr


def test_calls_across_the_pd_door_are_named_from_the_objects():
    """daemon/server/ calling into daemon/pd/ past pd.h, daemon/pd/ calling the
    server's top, and the server's base calling daemon/pd/: each seen in the
    objects alone (no include says it), each named with the function."""
    root = copy_tree()
    src = {"daemon/pd/inner.c": "int pd_inner(int n) { return n; }\n",
           "daemon/server/shortcut.c": "int pd_inner(int);\nint shortcut(int n) { return pd_inner(n); }\n",
           "daemon/server/top.c": "int top_fn(int n) { return n; }\n",
           "daemon/pd/upcall.c": "int top_fn(int);\nint upcall(int n) { return top_fn(n); }\n",
           "daemon/server/sbuf.c": "int pd_inner(int);\nint sbuf_x(int n) { return pd_inner(n); }\n"}
    for rel, text in src.items():
        with open(os.path.join(root, rel), "w") as f:
            f.write("/* a file of a planted call */\n" + text)
        obj = os.path.join(root, "build", "obj", rel[:-2] + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(["gcc", "-c", os.path.join(root, rel), "-o", obj], check=True, timeout=60)
    p = run_check(root)
    assert p.returncode == 1, p.stdout + p.stderr
    out = p.stdout.splitlines()
    want = ["daemon/server/shortcut.c: calls pd_inner (daemon/pd/inner.c), which daemon/pd/pd.h does not declare",
            "daemon/pd/upcall.c: calls top_fn (daemon/server/top.c): daemon/pd/ stands on daemon/server/'s base only",
            "daemon/server/sbuf.c: calls pd_inner (daemon/pd/inner.c): the base of daemon/server/ that daemon/pd/ "
            "stands on may not call daemon/pd/"]
    for w in want:
        assert any(l.startswith(w) for l in out), f"{w!r} not in:\n{p.stdout}"
    assert len(out) == len(want), p.stdout
