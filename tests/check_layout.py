#!/usr/bin/env python3
"""check_layout.py - fails on an #include that crosses the project's arrows
(docs/architecture.md), naming the file and the line, and on a circle between
two files of agent/ or tools/, by include or by call.

    daemon -> abi      cupti -> abi      bpf -> abi
    agent  -> bpf, abi, schema           tools -> schema, tools/common
    abi, schema -> nothing               tests -> anything

Inside agent/, by stage: main.c -> sources -> track -> sinks -> host, each
seeing every stage after it, and all of them record.h (the one record type);
track/http (the HTTP/1.1 tracker) sees only itself, not even bpf/ or abi/.
agent/ itself holds main.c and record.h alone: any other file belongs to a stage.

Inside daemon/, prefill/decode disaggregation (daemon/pd/) sits between the two
layers of daemon/server/: the server's top (server.c, fanout.c, generate.c,
main.c) reaches it only through its one header, daemon/pd/pd.h, by include and
by call (every pd/ function a server/ object uses is declared there); pd/ stands
on the server's base (PD_SEES: connections, requests, admission, the state, the
engine thread, HTTP, metrics, sbuf) and includes or calls nothing else of
server/; and that base, with every server/ module it includes or calls, knows
nothing of pd/. So calls run server top -> pd ->
server base, never back.

A folder may always include its own files. Generated headers in build/include
count as the folder they are made from: kpi_probes.h and kpi_cupti_probes.h
(dtrace -h of abi/*.d) as abi, *.skel.h as bpf, kpi_schema.h as schema.

Circles: among the files of each folder in CIRCLE_SCOPES, a file (x.c with its
x.h) depends on another when x.c includes the other's header, or when its
object (build/obj/...) calls a function or uses a variable the other's object
defines; no two may depend on each other, directly or round a longer circle.
(A header that includes another for its types, as tools/common/reqstats.h
does trace.h's rows, is not a dependency of its own: what the .c files
include and call is.) Objects are read with nm when they are built and newer
than their source (make test builds them first); include circles are checked
from the sources alone.
Usage: check_layout.py [ROOT]   (exit 1 and one line per crossing or circle)."""
import os, re, subprocess, sys

# component -> the components it may include from (besides itself)
ALLOWED = {
    "abi": set(),
    "schema": set(),
    "daemon": {"abi"},
    "cupti": {"abi"},
    "bpf": {"abi"},
    "agent": {"bpf", "abi", "schema"},
    "tools": {"schema", "tools/common"},
}
# The agent's stages, each seeing those after it (and bpf/, abi/, schema/).
AGENT_STAGES = ["main", "sources", "track", "sinks", "host", "record"]
AGENT_TOP = {"main.c": "agent/main", "record.h": "agent/record"}
AGENT_SEALED = {"agent/track/http": "agent/track"}   # sees only itself; counts as part of its parent
# daemon/pd/: its one door, and the base of daemon/server/ it stands on (modules).
PD, SERVER = "daemon/pd", "daemon/server"
PD_DOOR = "daemon/pd/pd.h"
PD_SEES = {SERVER + "/" + m for m in ("admit", "api", "config", "conn", "engine_thread", "http",
                                      "metrics", "req", "sbuf", "state")}
# Folders whose files may not depend on each other in a circle.
CIRCLE_SCOPES = ("agent", "daemon", "tools")

GENERATED = {"kpi_probes.h": "abi", "kpi_cupti_probes.h": "abi", "kpi_schema.h": "schema"}
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def agent_part(parts):
    """agent/<stage>/... -> "agent/<stage>" (agent/track/http sealed), agent/main.c
    -> "agent/main", agent/record.h -> "agent/record"; None for a file agent/
    has no place for."""
    if len(parts) == 2:
        return AGENT_TOP.get(parts[1])
    part = "agent/" + parts[1]
    if part == "agent/track" and len(parts) > 3 and "agent/track/" + parts[2] in AGENT_SEALED:
        return "agent/track/" + parts[2]
    return part if parts[1] in AGENT_STAGES else None


def component(rel):
    """The component a path (relative to the root) belongs to, or None."""
    parts = rel.split("/")
    if parts[0] == "tools":
        # each tool is its own component; tools/common is shared by all of them
        return "tools/common" if parts[1:2] == ["common"] else "tools/" + parts[1] if len(parts) > 2 else "tools"
    if parts[0] == "agent" and len(parts) > 1:
        return agent_part(parts) or "agent/?"
    return parts[0] if parts[0] in ALLOWED else None


def top(comp):
    return comp.split("/")[0] if comp else comp


def agent_allowed(src):
    """The agent parts src may include from, besides itself."""
    if src in AGENT_SEALED:
        return set()
    stage = src.split("/")[1]
    if stage not in AGENT_STAGES:
        return set()
    later = {"agent/" + s for s in AGENT_STAGES[AGENT_STAGES.index(stage) + 1:]}
    # a sealed part counts as its parent: whoever sees the parent sees it too
    return later | {k for k, parent in AGENT_SEALED.items()
                    if parent in later or parent == src}


def allowed_of(src):
    if src.startswith("tools"):
        return ALLOWED["tools"]
    if src.startswith("agent/"):
        return agent_allowed(src) | (set() if src in AGENT_SEALED else ALLOWED["agent"])
    return ALLOWED.get(src, set())


def may_include(src, dst):
    if src is None or dst is None or src == dst:
        return True
    return dst in allowed_of(src)


def resolve(root, rel_file, target):
    """The file an include names (relative to the root) and its component: the
    file's own folder first, then build/include (generated), then the root
    (-I.), as the compilers do. (None, None) for a system header or vmlinux.h."""
    here = os.path.dirname(rel_file)
    if os.path.exists(os.path.join(root, here, target)):
        path = os.path.normpath(os.path.join(here, target))
        return path, component(path)
    base = os.path.basename(target)
    if target == base and (base in GENERATED or base.endswith(".skel.h")):
        return None, GENERATED.get(base, "bpf")
    if os.path.exists(os.path.join(root, target)):
        path = os.path.normpath(target)
        return path, component(path)
    return None, None


def source_files(root, folders):
    for top_dir in sorted(folders):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top_dir)):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def includes(root, rel):
    """(line number, the include as written, its file or None, its component)."""
    with open(os.path.join(root, rel), errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            m = INCLUDE.match(line)
            if m:
                yield (n, m.group(1)) + resolve(root, rel, m.group(1))


def in_folder(rel, folder):
    return rel is not None and rel.startswith(folder + "/")


def server_base(edges):
    """PD_SEES and every server/ module they reach by the edges given: the base
    of daemon/server/ that daemon/pd/ stands on."""
    base, todo = set(), sorted(PD_SEES)
    while todo:
        m = todo.pop()
        if m in base:
            continue
        base.add(m)
        todo += [d for d in edges.get(m, {}) if in_folder(d, SERVER)]
    return base


def pd_crossing(rel, path, base):
    """Why rel may not include path across daemon/server/ and daemon/pd/, or None."""
    if in_folder(rel, PD) and in_folder(path, SERVER) and module(path) not in PD_SEES:
        return (f"daemon/pd/ stands on daemon/server/'s base only "
                f"({', '.join(sorted(m.split('/')[-1] + '.h' for m in PD_SEES))}), not its top")
    if in_folder(path, PD) and not in_folder(rel, PD):
        if module(rel) in base:
            return "the base of daemon/server/ that daemon/pd/ stands on may not know daemon/pd/"
        if not in_folder(rel, SERVER):
            return "only daemon/server/ calls daemon/pd/"
        if path != PD_DOOR:
            return f"daemon/server/ reaches daemon/pd/ only through {PD_DOOR}"
    return None


def check(root):
    crossings = []
    base = server_base(include_edges(root, "daemon"))
    for rel in source_files(root, ALLOWED):
        src = component(rel)
        if src == "agent/?":
            crossings.append(f"{rel}:1: agent/ has no place for this file: agent/ holds main.c and "
                             f"record.h, everything else a stage folder ({', '.join(AGENT_STAGES[1:-1])})")
            continue
        for n, inc, path, dst in includes(root, rel):
            if not may_include(src, dst):
                crossings.append(f"{rel}:{n}: includes \"{inc}\" ({src} -> {dst}): "
                                 f"{src} may include only {', '.join(sorted(allowed_of(src))) or 'itself'}")
                continue
            why = pd_crossing(rel, path, base)
            if why:
                crossings.append(f"{rel}:{n}: includes \"{inc}\": {why}")
    return crossings


# ---- circles -------------------------------------------------------------------

def module(rel):
    """A file and its header are one module: agent/track/assemble."""
    return os.path.splitext(rel)[0]


def include_edges(root, scope):
    """{module: {module whose header its .c includes: (file, line)}} within scope."""
    edges = {}
    for rel in source_files(root, [scope]):
        a = module(rel)
        edges.setdefault(a, {})
        if not rel.endswith((".c", ".cu")):
            continue
        for n, _, path, _ in includes(root, rel):
            if path and top(path) == scope and module(path) != a:
                edges[a].setdefault(module(path), (rel, n))
    return edges


NM_DEFINED = set("TDBRCGSVW")


def object_symbols(root, scope):
    """({symbol: module defining it}, {module: [symbols its object uses]}) from
    the up-to-date objects under build/obj/<scope>."""
    obj_root = os.path.join(root, "build", "obj")
    objs = {}
    for dirpath, dirnames, files in os.walk(os.path.join(obj_root, scope)):
        dirnames.sort()
        for f in sorted(files):
            if not f.endswith(".o"):
                continue
            obj = os.path.join(dirpath, f)
            src = os.path.relpath(obj, obj_root)[:-2] + ".c"
            if os.path.exists(os.path.join(root, src)) and \
                    os.path.getmtime(obj) >= os.path.getmtime(os.path.join(root, src)):
                objs[obj] = module(src)     # else moved or changed since: it says nothing now
    defs, uses = {}, {m: [] for m in objs.values()}
    p = subprocess.run(["nm", "-P", "-A", *objs], capture_output=True, text=True) if objs else None
    for line in p.stdout.splitlines() if p else []:
        # "path/x.o: symbol type [value size]"
        obj, _, rest = line.partition(": ")
        w = rest.split()
        if obj not in objs or len(w) < 2:
            continue
        if w[1] == "U":
            uses[objs[obj]].append(w[0])
        elif w[1] in NM_DEFINED:
            defs.setdefault(w[0], objs[obj])
    return defs, uses


def symbol_edges(root, scope):
    """{module: {module whose symbol its object uses: (file, symbol)}} from the
    up-to-date objects under build/obj/<scope>; and how many objects were read."""
    defs, uses = object_symbols(root, scope)
    edges = {}
    for m, syms in uses.items():
        edges[m] = {}
        for s in syms:
            d = defs.get(s)
            if d and d != m:
                edges[m].setdefault(d, (m + ".c", s))
    return edges, len(uses)


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan),
    each as a list of modules in a circle's order."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def one_circle(edges, comp):
    """A path round comp: from its first module back to it, inside comp."""
    members, start = set(comp), sorted(comp)[0]
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges.get(v, {})):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return comp + [comp[0]]


def describe(edges, path, how):
    steps = []
    for a, b in zip(path, path[1:]):
        where, what = edges[a][b]
        steps.append(f"{where}:{what}" if how == "include" else f"{where} calls {what} ({b}.c)")
    return steps


def others(comp, path):
    rest = sorted(set(comp) - set(path))
    return f" (also in it: {', '.join(m + '.c' for m in rest)})" if rest else ""


def check_circles(root, scopes=CIRCLE_SCOPES):
    """One line per circle, starting with the file and line (or file) of its
    first step; and notes on what could not be checked."""
    found, notes = [], []
    for scope in scopes:
        inc = include_edges(root, scope)
        for comp in cycles(inc):
            path = one_circle(inc, comp)
            steps = describe(inc, path, "include")
            found.append(f"{steps[0]}: circle of includes "
                         + "; ".join(f"{s} includes {b}.h" for s, b in zip(steps, path[1:]))
                         + others(comp, path))
        sym, n_obj = symbol_edges(root, scope)
        if not n_obj:
            notes.append(f"check-layout: {scope}/: no up-to-date objects in build/obj, call circles "
                         f"not checked (run make first)")
        for comp in cycles(sym):
            path = one_circle(sym, comp)
            found.append(f"{path[0]}.c: circle of calls " + "; ".join(describe(sym, path, "call"))
                         + others(comp, path))
    return found, notes


def check_pd_calls(root):
    """The calls across daemon/server/ and daemon/pd/ (read from the objects, as
    the circles are): server/ uses of pd/ only what pd.h declares; pd/ of server/
    only its base (PD_SEES); that base nothing of pd/. One line per call."""
    door = os.path.join(root, PD_DOOR)
    declared = set(re.findall(r"\w+", open(door, errors="replace").read())) if os.path.exists(door) else set()
    defs, uses = object_symbols(root, "daemon")
    edges = include_edges(root, "daemon")
    for m, syms in uses.items():
        for sym in syms:
            if defs.get(sym) and defs[sym] != m:
                edges.setdefault(m, {})[defs[sym]] = None
    base = server_base(edges)
    out = []
    for m in sorted(uses):
        for sym in sorted(set(uses[m])):
            d = defs.get(sym)
            if not d or d == m:
                continue
            if in_folder(m, PD) and in_folder(d, SERVER) and d not in PD_SEES:
                out.append(f"{m}.c: calls {sym} ({d}.c): daemon/pd/ stands on daemon/server/'s base "
                           f"only, not its top")
            elif in_folder(d, PD) and not in_folder(m, PD):
                if m in base:
                    out.append(f"{m}.c: calls {sym} ({d}.c): the base of daemon/server/ that daemon/pd/ "
                               f"stands on may not call daemon/pd/")
                elif sym not in declared:
                    out.append(f"{m}.c: calls {sym} ({d}.c), which {PD_DOOR} does not declare: "
                               f"daemon/pd/ is called through its one header")
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    crossings = check(root) + check_pd_calls(root)
    circles, notes = check_circles(root)
    for c in crossings + circles:
        print(c)
    for n in notes:
        print(n, file=sys.stderr)
    if crossings:
        print(f"check-layout: {len(crossings)} include(s) or call(s) cross the arrows of docs/architecture.md: "
              "move the shared definition to abi/ (a contract) or to the folder both may see",
              file=sys.stderr)
    if circles:
        print(f"check-layout: {len(circles)} circle(s) between files: make one side stop knowing the "
              "other (move what both need where both may see it, or hand it a callback)",
              file=sys.stderr)
    return 1 if crossings or circles else 0


if __name__ == "__main__":
    sys.exit(main())
