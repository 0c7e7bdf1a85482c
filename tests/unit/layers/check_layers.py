"""tests/unit/layers: the house's arrows all point down, and no two files call each other.

Floors, top to bottom: bench -> runtime -> viewer -> shm -> schema; shm/base, the layer at
the bottom of shm/ (growable array, error string, /proc reader), includes no other file of
the project. A file may use its own floor and the floors below it, never one above (schema/pt_wire.h defines the wire
that shm/ builds on; viewer/ reads segments through shm/; runtime/ calls viewer/core).

C and C++: every `#include "..."` of a file under one of these folders is resolved (next
to the file, else from the repository root) and its floor compared with the file's; the
include graph of all files (tests/ and fuzz/ included) has no cycle, so no two files
include each other, and no header includes itself through others.

Within viewer/, the same rule between its parts, bottom to top: viewer/core (the reading
core) -> viewer/hub (pytrace-hub and its client library, built on the core) -> viewer/top
(pytrace-top, which reads through a hub too). core includes neither hub nor top; hub not top.

The tracer core (runtime/_pytrace): its files -- CORE below: session, threads, symbols and
their headers -- know nothing of the hook adapters (ADAPTERS: sys.monitoring, frame
evaluation, PyEval_SetProfile). A core file includes no other file of runtime/_pytrace
than the core's, and names nothing an adapter defines for others (its functions and
variables with external linkage): the core reaches an adapter only through the
pt_hook_ops_t table the adapter registers. Adapters do not name each other's either (a
fall back goes through the core). Every runtime/_pytrace/pt_* file is one or the other,
so a new file has to be placed.

Python (runtime/pytrace): no module imports another module's private name
(`from .x import _name`, `x._name`); importing a package-private module such as
`pytrace._launch` or the extension `pytrace._pytrace` is allowed.

Usage: python3 check_layers.py REPO_ROOT      (exit 1 with one line per violation)
"""
import ast
import os
import re
import sys

FLOORS = ["schema", "shm", "viewer", "runtime", "bench"]   # bottom to top
BASE = "shm/base/"   # includes only its own files
SOURCE_EXT = (".c", ".h", ".cc", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def floor_of(rel):
    top = rel.split("/", 1)[0]
    return FLOORS.index(top) if top in FLOORS else None


def source_files(root):
    for top in FLOORS + ["tests"]:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in ("build", "__pycache__", "corpus", "findings")]
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def resolve(root, rel, target):
    for base in (os.path.dirname(rel), ""):
        cand = os.path.normpath(os.path.join(base, target))
        if not cand.startswith("..") and os.path.isfile(os.path.join(root, cand)):
            return cand
    return None     # generated (pytrace_generated.h) or a system header in quotes


def check_c(root, problems):
    graph = {}
    for rel in source_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        graph[rel] = []
        for target in INCLUDE.findall(text):
            dep = resolve(root, rel, target)
            if dep is None:
                continue
            graph[rel].append(dep)
            if rel.startswith(BASE) and not dep.startswith(BASE):
                problems.append("%s includes %s: the base layer (%s) includes nothing else of the project"
                                % (rel, target, BASE))
            mine, theirs = floor_of(rel), floor_of(dep)
            if mine is not None and theirs is not None and theirs > mine:
                problems.append("%s includes %s: %s/ is above %s/ (arrows point down: %s)"
                                % (rel, target, FLOORS[theirs], FLOORS[mine],
                                   " -> ".join(reversed(FLOORS))))
    # cycles (two files that include each other are the shortest)
    state = {}

    def visit(node, path):
        state[node] = 1
        path.append(node)
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                problems.append("include cycle: " + " -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return len(graph)


VIEWER_PARTS = ["viewer/core", "viewer/hub", "viewer/top"]   # bottom to top


def viewer_part_of(rel):
    for i, part in enumerate(VIEWER_PARTS):
        if rel.startswith(part + "/"):
            return i
    return None


def check_viewer(root, problems):
    """viewer/core < viewer/hub < viewer/top: a part includes its own files and the parts below."""
    checked = 0
    for rel in source_files(root):
        mine = viewer_part_of(rel)
        if mine is None:
            continue
        checked += 1
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for target in INCLUDE.findall(text):
            dep = resolve(root, rel, target)
            theirs = viewer_part_of(dep) if dep else None
            if theirs is not None and theirs > mine:
                problems.append("%s includes %s: %s/ is above %s/ (arrows point down: %s)"
                                % (rel, target, VIEWER_PARTS[theirs], VIEWER_PARTS[mine],
                                   " -> ".join(reversed(VIEWER_PARTS))))
    return checked


TRACER_DIR = "runtime/_pytrace"
CORE = {"pt_tracer.h", "pt_tracer_inline.h", "pt_tracer_internal.h", "pt_session.c", "pt_threads.c",
        "pt_symbols.c"}
ADAPTERS = {"pt_adapters.h", "pt_monitoring.c", "pt_evalframe.c", "pt_profile.c", "pt_itt.c", "pt_tasks.c",
            "pt_tasks.h"}
# an adapter's own parts in files of their own: {part: the adapters that call it}
ADAPTER_PARTS = {"pt_tasks.c": {"pt_monitoring.c", "pt_profile.c"}, "pt_tasks.h": {"pt_monitoring.c", "pt_profile.c"}}
C_COMMENT_OR_STRING = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
# a file-scope declaration or definition that starts in column 0 and is not static:
# "int pt_x_register(void)", "PT_HIDDEN int pt_x(void);", "const void *pt_y(...)", "int pt_z = 0;"
EXTERN_DECL = re.compile(r"^(?!static\b|typedef\b|struct\b|enum\b|union\b|#|extern\b\s*\")"
                         r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\(|=|;|\[)", re.M)


ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)\s*")


def code_only(text):
    """The C text without comments, string literals and __attribute__((...))."""
    return ATTRIBUTE.sub("", C_COMMENT_OR_STRING.sub(" ", text))


def external_names(text):
    names = set()
    for m in EXTERN_DECL.finditer(code_only(text)):
        if m.group(1) not in ("if", "for", "while", "return", "sizeof"):
            names.add(m.group(1))
    return names


def check_tracer_core(root, problems):
    folder = os.path.join(root, TRACER_DIR)
    if not os.path.isdir(folder):
        return 0
    files = sorted(n for n in os.listdir(folder) if n.endswith((".c", ".h")))
    for name in files:
        if name.startswith("pt_") and name not in CORE and name not in ADAPTERS:
            problems.append("%s/%s is neither core nor hook adapter: add it to CORE or ADAPTERS in %s"
                            % (TRACER_DIR, name, os.path.relpath(__file__, root)))
    for name in sorted(CORE | ADAPTERS):
        if name not in files:
            problems.append("%s/%s is listed in %s but does not exist"
                            % (TRACER_DIR, name, os.path.relpath(__file__, root)))
    text = {}
    for name in files:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            text[name] = f.read()
    defined_by = {}                                  # external name -> adapter file
    for name in sorted(ADAPTERS & set(files), key=lambda n: (n.endswith(".h"), n)):
        for ident in external_names(text[name]):
            defined_by.setdefault(ident, name)     # the .c that defines it, else the header
    for name in sorted(CORE & set(files)):
        for target in INCLUDE.findall(text[name]):
            local = os.path.basename(target)
            if os.path.dirname(target) in ("", ".") and local in files and local not in CORE:
                problems.append("%s/%s includes %s: the tracer core includes only its own files "
                                "(the hooks reach it through pt_hook_ops_t)" % (TRACER_DIR, name, target))
    for name in sorted((CORE | ADAPTERS) & set(files)):
        if name == "pt_adapters.h":
            continue                                 # declares them for module.c
        used = set(IDENT.findall(code_only(text[name])))
        for ident in sorted(used & set(defined_by)):
            owner = defined_by[ident]
            if (owner == name or os.path.splitext(owner)[0] == os.path.splitext(name)[0]
                    or name in ADAPTER_PARTS.get(owner, ())):
                continue                             # its own
            what = "the tracer core" if name in CORE else "a hook adapter"
            problems.append("%s/%s names %s of %s: %s calls an adapter only through its "
                            "pt_hook_ops_t" % (TRACER_DIR, name, ident, owner, what))
    return len([n for n in files if n in CORE])


def check_python(root, problems):
    pkg = os.path.join(root, "runtime", "pytrace")
    modules = []
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = [d for d in dirnames if d not in ("fb", "__pycache__")]
        for name in filenames:
            if name.endswith(".py"):
                modules.append(os.path.join(dirpath, name))

    def is_module(base_dir, name):
        return (os.path.isfile(os.path.join(base_dir, name + ".py"))
                or os.path.isdir(os.path.join(base_dir, name))
                or name == "_pytrace")              # the extension

    for path in sorted(modules):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        here = os.path.dirname(path)
        imported = {}                               # local name -> sibling module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here
                for _ in range(node.level - 1):
                    base = os.path.dirname(base)
                parts = (node.module or "").split(".") if node.module else []
                for alias in node.names:
                    name = alias.name
                    if node.module is None and is_module(base, name):
                        imported[alias.asname or name] = name
                        continue                    # `from . import _launch`: a module
                    if parts and parts[0] == "fb":
                        continue                    # flatc-generated code
                    if name.startswith("_") and not name.startswith("__"):
                        problems.append("%s:%d imports the private name %s from %s"
                                        % (rel, node.lineno, name, node.module or "the package"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                problems.append("%s:%d uses the private name %s.%s"
                                % (rel, node.lineno, node.value.id, node.attr))
    return len(modules)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    n_c = check_c(root, problems)
    n_viewer = check_viewer(root, problems)
    n_core = check_tracer_core(root, problems)
    n_py = check_python(root, problems)
    for p in problems:
        print(p)
    if problems:
        print("%d problem(s) in the house's layers" % len(problems))
        return 1
    print("layers: %d C files include only downwards, without cycles (%d of viewer/: core, hub, top "
          "in that order); the tracer core's %d files name no hook adapter; %d Python modules use "
          "no other module's private names" % (n_c, n_viewer, n_core, n_py))
    return 0


if __name__ == "__main__":
    sys.exit(main())
