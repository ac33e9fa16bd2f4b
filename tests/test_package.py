"""make deb's package, installed with dpkg into a throwaway root: an overlay
of this machine's / (upper layer on a tmpfs, in a mount namespace of the
test's own, gone when it ends), so the package meets a real dpkg database,
adduser and the Debian libraries its Depends: name, and nothing it does
reaches the host. Every tool runs --version and --help from /usr/bin or
/usr/sbin, systemd-analyze verify accepts the unit, man -w finds every page,
remove keeps the trace, purge removes what install added; the agent on a
kernel without BTF (or the ring buffer) says so in one line. lintian, on the
.deb, passes with the overrides packaging/lintian-overrides explains: a minute
of a loaded machine, so `make deb-lint`, outside the suite (docs/install.md).
Runs kpi-agent (--version, the refusals): alone, as every agent test."""
import os, re, shutil

import kpitest

TOOLS = {"kpi-agent": "/usr/sbin", "kpi-infer": "/usr/bin", "kpitop": "/usr/bin",
         "kpi-report": "/usr/bin", "kpi-bench": "/usr/bin", "kpi-ship": "/usr/bin"}
SECTION = {"kpi-agent": 8}
# what install adds and purge must take away (dpkg's own database and logs
# keep their record of the package, as they do on any machine)
WATCHED = ["/usr/bin", "/usr/sbin", "/usr/lib/kpiscope", "/usr/share/kpiscope", "/usr/share/man/man1",
           "/usr/share/man/man8", "/usr/share/doc/kpiscope", "/lib/systemd/system", "/var/lib/kpiscope"]


def version():
    return open(os.path.join(kpitest.ROOT, "VERSION")).read().strip()


_deb = []


def build_deb():
    """packaging/mkdeb.sh's package, built once for the module."""
    if _deb:
        return _deb[0]
    # the same tree as make deb's, compressed fast (xz is a minute under load)
    p = kpitest.run(["sh", "packaging/mkdeb.sh", kpitest.BUILD, version()], timeout=300, cwd=kpitest.ROOT,
                    env=dict(os.environ, DEB_COMPRESS="-Zgzip -z1"))
    assert p.returncode == 0, f"packaging/mkdeb.sh: {p.stdout}{p.stderr}"
    arch = kpitest.run(["dpkg", "--print-architecture"], check=True).stdout.strip()
    deb = os.path.join(kpitest.BUILD, f"kpiscope_{version()}_{arch}.deb")
    assert os.path.exists(deb), p.stdout
    _deb.append(deb)
    return deb


class Root:
    """An overlay of / in a mount namespace held by a sleeping process."""

    def __init__(self):
        kpitest.require_root("installing a package into an overlay root")
        for t in ("unshare", "nsenter", "chroot"):
            if not shutil.which(t):
                raise kpitest.Skip(f"{t} is missing (util-linux, coreutils)")
        self.ns = kpitest.Proc(["unshare", "--mount", "--propagation", "private", "sleep", "infinity"])
        d = kpitest.tmpdir("kpi-pkgroot-")
        self.dir = os.path.join(d, "root")
        self.ns_run(["mount", "-t", "tmpfs", "-o", "size=2g", "kpi-pkgroot", d])
        self.ns_run(["mkdir", "-p", f"{d}/upper", f"{d}/work", self.dir])
        self.ns_run(["mount", "-t", "overlay", "overlay", "-o",
                     f"lowerdir=/,upperdir={d}/upper,workdir={d}/work", self.dir])
        for m in ("/proc", "/dev", "/sys"):
            self.ns_run(["mount", "--bind", m, self.dir + m])
        # man-db's dpkg trigger rebuilds the whole index at each install and
        # remove (tens of seconds here): off, as its debconf question allows;
        # man -w reads the directories, not the index
        self.run(["rm", "-f", "/var/lib/man-db/auto-update"])
        # a machine that never had kpiscope, whatever this one has (the package,
        # the user made by hand as the unit's old comment said, a trace)
        self.run(["sh", "-c", "dpkg -P kpiscope >/dev/null 2>&1; userdel kpiscope 2>/dev/null; "
                  "groupdel kpiscope 2>/dev/null; rm -rf /var/lib/kpiscope; true"])

    def ns_run(self, argv, check=True, timeout=120, env=None):
        p = kpitest.run(["nsenter", "-t", str(self.ns.pid), "-m", *argv], timeout=timeout,
                        env=env)
        if check:
            assert p.returncode == 0, f"{argv} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
        return p

    def run(self, argv, check=True, timeout=120, env=None):
        e = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **(env or {})}
        return self.ns_run(["chroot", self.dir, *argv], check=check, timeout=timeout, env=e)

    def tree(self):
        """The watched paths' files and directories, and the kpiscope user's lines."""
        p = self.run(["sh", "-c", "find " + " ".join(WATCHED) + " 2>/dev/null; "
                      "grep '^kpiscope:' /etc/passwd /etc/group || true"], check=False)
        return set(p.stdout.split("\n")) - {""}


def test_package_installs_runs_and_purges():
    deb = build_deb()
    info = kpitest.run(["dpkg-deb", "--field", deb, "Depends", "Version", "Architecture"], check=True).stdout
    deps = re.search(r"^Depends: (.*)$", info, re.M).group(1)
    # dpkg-shlibdeps's word, checked against the programs' own NEEDED entries
    for lib, pkg in (("libbpf.so.1", "libbpf1"), ("libsqlite3.so.0", "libsqlite3-0"),
                     ("libjansson.so.4", "libjansson4"), ("libc.so.6", "libc6")):
        needed = kpitest.run(["sh", "-c", f"objdump -p {kpitest.BIN}/kpi-agent {kpitest.BIN}/kpi-infer "
                              f"| grep -c 'NEEDED.*{lib}'"]).stdout.strip()
        assert needed != "0" and re.search(rf"\b{re.escape(pkg)}\b", deps), \
            f"{lib} is linked ({needed} NEEDED), Depends: {deps}"
    assert "adduser" in deps, deps
    assert f"Version: {version()}" in info, info

    root = Root()
    before = root.tree()
    p = root.run(["dpkg", "-i", deb], timeout=180)
    assert "kpiscope" in p.stdout, p.stdout

    for tool, d in TOOLS.items():
        v = root.run([f"{d}/{tool}", "--version"])
        assert re.match(rf"{re.escape(tool)} {re.escape(version())} \(commit \S+\)\n", v.stdout), v.stdout
        h = root.run([f"{d}/{tool}", "--help"])
        assert "--version" in h.stdout and "usage" in h.stdout.lower(), f"{tool} --help:\n{h.stdout[:300]}"
        w = root.run(["man", "-w", tool])
        sec = SECTION.get(tool, 1)
        assert w.stdout.strip() == f"/usr/share/man/man{sec}/{tool}.{sec}.gz", w.stdout
    # the agent's kernel line: this machine has every one of them
    v = root.run(["/usr/sbin/kpi-agent", "--version"]).stdout
    assert re.search(r"^kernel \S+: BTF yes, ring buffer yes, uprobes yes, USDT semaphores yes$", v, re.M), v

    # the unit, as systemd reads it, pointing at what the package installed
    sa = root.run(["systemd-analyze", "verify", "/lib/systemd/system/kpi-agent.service"], check=False)
    assert sa.returncode == 0, f"systemd-analyze verify: {sa.stdout}{sa.stderr}"
    unit = root.run(["cat", "/lib/systemd/system/kpi-agent.service"]).stdout
    assert "ExecStart=/usr/sbin/kpi-agent " in unit

    # postinst's user and trace directory
    st = root.run(["stat", "-c", "%U %G %a", "/var/lib/kpiscope"]).stdout.split()
    assert st == ["kpiscope", "kpiscope", "750"], st
    assert root.run(["getent", "passwd", "kpiscope"]).stdout.split(":")[6].strip() in (
        "/usr/sbin/nologin", "/bin/false"), "the system user must have no login shell"

    agent_refusals(root)

    # remove keeps the trace; purge takes it and everything else install added
    root.run(["sh", "-c", "echo trace > /var/lib/kpiscope/trace.db"])
    root.run(["dpkg", "-r", "kpiscope"])
    for tool, d in TOOLS.items():
        assert root.run(["test", "-e", f"{d}/{tool}"], check=False).returncode == 1, tool
    assert root.run(["cat", "/var/lib/kpiscope/trace.db"]).stdout == "trace\n"
    root.run(["dpkg", "-P", "kpiscope"])
    after = root.tree()
    assert after == before, f"left by purge: {sorted(after - before)}; taken: {sorted(before - after)}"


def agent_refusals(root):
    """The package installs where the kernel lacks BTF, the ring buffer or
    uprobes (dpkg has no kernel check); the agent then refuses in one line
    naming what is missing and the way out. KPI_AGENT_DISABLE makes the
    running kernel look so."""
    for feature, words in (("btf", ["/sys/kernel/btf/vmlinux", "CONFIG_DEBUG_INFO_BTF=y"]),
                           ("ringbuf", ["ring buffer", "Linux 5.8"]),
                           ("uprobe", ["uprobe", "CONFIG_UPROBE_EVENTS=y"])):
        p = root.run(["/usr/sbin/kpi-agent", "--db", "/tmp/never.db", "--duration", "1"], check=False,
                     env={"KPI_AGENT_DISABLE": feature}, timeout=60)
        lines = [l for l in p.stderr.split("\n") if l]
        assert p.returncode == 1, f"{feature}: exit {p.returncode}\n{p.stdout}{p.stderr}"
        assert len(lines) == 1 and lines[0].startswith("kpi-agent: this kernel has no"), p.stderr
        for w in words:
            assert w in lines[0], f"{feature}: {lines[0]!r} lacks {w!r}"
        assert "writing" not in p.stdout and root.run(["test", "-e", "/tmp/never.db"],
                                                      check=False).returncode == 1
        v = root.run(["/usr/sbin/kpi-agent", "--version"], env={"KPI_AGENT_DISABLE": feature}).stdout
        name = {"btf": "BTF", "ringbuf": "ring buffer", "uprobe": "uprobes"}[feature]
        assert f"{name} no" in v, v
