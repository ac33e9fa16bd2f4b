#!/usr/bin/env python3
"""check_layout.py - fails on an #include that crosses the project's arrows
(docs/architecture.md), naming the file and the line.

    daemon -> abi      cupti -> abi      bpf -> abi
    agent  -> bpf, abi, schema           tools -> schema, tools/common
    abi, schema -> nothing               tests -> anything

A folder may always include its own files. Generated headers in build/include
count as the folder they are made from: kpi_probes.h and kpi_cupti_probes.h
(dtrace -h of abi/*.d) as abi, *.skel.h as bpf, kpi_schema.h as schema.
Usage: check_layout.py [ROOT]   (exit 1 and one line per crossing include)."""
import os, re, sys

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
GENERATED = {"kpi_probes.h": "abi", "kpi_cupti_probes.h": "abi", "kpi_schema.h": "schema"}
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def component(rel):
    """The component a path (relative to the root) belongs to, or None."""
    parts = rel.split("/")
    if parts[0] == "tools":
        # each tool is its own component; tools/common is shared by all of them
        return "tools/common" if parts[1:2] == ["common"] else "tools/" + parts[1] if len(parts) > 2 else "tools"
    return parts[0] if parts[0] in ALLOWED else None


def may_include(src, dst):
    if src is None or dst is None or src == dst:
        return True
    if src.startswith("tools/") or src == "tools":
        return dst in ALLOWED["tools"]
    return dst in ALLOWED.get(src, set())


def resolve(root, rel_file, target):
    """The component an include names: the file's own folder first, then
    build/include (generated), then the root (-I.), as the compilers do."""
    here = os.path.dirname(rel_file)
    if os.path.exists(os.path.join(root, here, target)):
        return component(os.path.normpath(os.path.join(here, target)))
    base = os.path.basename(target)
    if target == base and (base in GENERATED or base.endswith(".skel.h")):
        return GENERATED.get(base, "bpf")
    if os.path.exists(os.path.join(root, target)):
        return component(os.path.normpath(target))
    return None  # a system header or vmlinux.h: outside the arrows


def check(root):
    crossings = []
    for top in sorted(ALLOWED):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                src = component(rel)
                with open(path, errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dst = resolve(root, rel, m.group(1))
                        if not may_include(src, dst):
                            crossings.append(f"{rel}:{n}: includes \"{m.group(1)}\" ({src} -> {dst}): "
                                             f"{src} may include only {', '.join(sorted(allowed_of(src))) or 'itself'}")
    return crossings


def allowed_of(src):
    return ALLOWED["tools"] if src.startswith("tools") else ALLOWED.get(src, set())


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    crossings = check(root)
    for c in crossings:
        print(c)
    if crossings:
        print(f"check-layout: {len(crossings)} include(s) cross the arrows of docs/architecture.md: "
              "move the shared definition to abi/ (a contract) or to the folder both may see", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
