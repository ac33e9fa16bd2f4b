"""Containers for the tests and benchmarks of kpi-agent in pods (issue 42),
with no image registry: a root file system the test builds (the worktree's
binary, the shared libraries ldd lists, a model), run as a directory
(`podman run --rootfs`) or imported as an image (`podman import`), whose
containers each get an overlay mount over the image's one layer, as pods of
one image do under a real runtime."""
import json, os, re, shutil, subprocess

import kpitest
import agenttest as at
import servertest

PORT = 8000
SERVE = ["/kpi-infer", "--model", "/m/tiny.gguf", "--port", str(PORT)]

# podman as root asks for RLIMIT_NOFILE 1048576 and RLIMIT_NPROC 32768 by
# default; raising a hard limit needs CAP_SYS_RESOURCE, which a sandboxed
# test host may not grant.  Lowering is always allowed.
ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


def require(*tools):
    """Skips (saying why) unless this runs as root with kpi-agent and kpi-infer
    built and each of tools (podman, runc, ctr, containerd, bpftool) installed."""
    at.require_agent_and_infer()
    pkg = {"ctr": "containerd"}
    for tool in tools:
        if not shutil.which(tool):
            raise kpitest.Skip(f"{tool} is not installed (make deps installs {pkg.get(tool, tool)})")


def rootfs_with(root, binary, dest):
    """A container root file system at root: binary at dest, the shared
    libraries ldd lists, /etc/passwd."""
    for sub in ("etc", "proc", "sys", "dev", "tmp"):
        os.makedirs(os.path.join(root, sub))
    os.makedirs(os.path.dirname(root + dest), exist_ok=True)
    shutil.copy2(binary, root + dest)
    out = kpitest.run(["ldd", binary], check=True).stdout
    for word in out.split():
        if word.startswith("/") and os.path.exists(word):
            dst = root + word
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.realpath(word), dst)
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/:/bin/false\n")


def build_rootfs(d):
    """The server's root file system: kpi-infer, its libraries, a model."""
    root = os.path.join(d, "rootfs")
    rootfs_with(root, servertest.KPI_INFER, "/kpi-infer")
    os.makedirs(os.path.join(root, "m"))
    p = kpitest.run([servertest.KPI_INFER, "--make-model", os.path.join(root, "m", "tiny.gguf"),
                     "--preset", "tiny", "--seed", "1"], check=True, timeout=600)
    # the weight type make-model says it wrote: "... (..., F16) to PATH"
    m = re.search(r", (\w+)\) to ", p.stdout)
    assert m, p.stdout
    with open(root + ".weight-type", "w") as f:
        f.write(m.group(1))
    return root


def weight_type(root):
    """The weight type of build_rootfs's model, as kpi-infer --make-model named it."""
    with open(root + ".weight-type") as f:
        return f.read()


def import_image(d, root, name):
    """root as an image of one layer, name (localhost/NAME:latest), removed at
    cleanup with its containers."""
    tar = os.path.join(d, f"{name}.tar")
    kpitest.run(["tar", "-C", root, "-cf", tar, "."], check=True, timeout=120)
    ref = f"localhost/{name}:latest"
    kpitest.run(["podman", "import", tar, ref], check=True, timeout=120)
    kpitest.on_cleanup(lambda: kpitest.run(["podman", "rmi", "-f", ref], timeout=120))
    os.unlink(tar)
    return ref


def run_server(name, image, *args, network="none"):
    """kpi-infer in a container of image, serving: (Proc, host pid)."""
    p = kpitest.Proc(["podman", "run", "--rm", "--runtime", "runc", *ULIMITS, "--network", network,
                      "--name", name, image, *SERVE, *args])
    kpitest.on_cleanup(lambda: kpitest.run(["podman", "rm", "-f", "-t", "0", name], timeout=60))
    p.wait_line("listening on", timeout=60)
    out = kpitest.run(["podman", "inspect", "--format", "{{.State.Pid}}", name], check=True).stdout
    return p, int(out)


def uprobe_links(prog_names):
    """How many BPF links on the host run one of prog_names (the kernel's
    count, from bpftool; uprobes and USDT probes are perf_event links)."""
    def js(*args):
        return json.loads(subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True,
                                         check=True).stdout or "[]")
    ids = {p["id"] for p in js("prog", "show") if p.get("name") in prog_names}
    return sum(1 for ln in js("link", "show") if ln.get("prog_id") in ids)


# the handlers of kpi-infer's USDT probes (bpf/kpi.bpf.c), as bpftool names them
USDT_PROGS = {"kpi_request_admitted", "kpi_request_rejected", "kpi_request_scheduled", "kpi_step_begin",
              "kpi_step_end", "kpi_request_first_token", "kpi_request_preempted", "kpi_request_finished",
              "kpi_request_cancelled", "kpi_response_end"}
