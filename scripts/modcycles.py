#!/usr/bin/env python3
"""Import cycles between the modules of each crate: every `crate::` and `super::` path in a
module's source (its tests left out), and every path into one of its own submodules, is an
edge to the module file it names (a child reaching up into its parent is not); a strongly
connected set of more than one module is a cycle. Prints one line per cycle and exits 1 when
there is any, so CI fails on a new one.

    scripts/modcycles.py [WORKSPACE]      # default: the checkout this script is in
"""
import pathlib
import re
import sys

PATH = re.compile(r"\b(crate|(?:super::)*super)::(\{[^}]*\}|[A-Za-z_][\w:]*)", re.S)
TESTS = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))?\s+)?mod\s+\w+\s*\{")


def modules(src):
    """Module path (tuple of names) -> source file, for one crate's src folder."""
    out = {}
    for f in src.rglob("*.rs"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts.pop()
        out[tuple(parts)] = f
    return out


def targets(segments, known):
    """The longest prefix of a path that is a module: the file the path reaches into."""
    for n in range(len(segments), 0, -1):
        if tuple(segments[:n]) in known:
            return tuple(segments[:n])
    return None


def edges(module, path, known):
    text = path.read_text(encoding="utf-8", errors="replace")
    m = TESTS.search(text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"//[^\n]*", "", text)
    # A file's own module is where `super` starts from: mod.rs/lib.rs is the folder's module.
    here = list(module)
    out = set()
    for head, rest in PATH.findall(text):
        if head == "crate":
            base = []
        else:
            ups = head.count("super")
            base = here[: len(here) - ups] if ups <= len(here) else []
        if rest.startswith("{"):
            firsts = [p.strip().split("::")[0] for p in rest[1:-1].split(",") if p.strip()]
            paths = [[f] for f in firsts if f not in ("self", "*")]
        else:
            paths = [rest.split("::")]
        for p in paths:
            t = targets(base + p, known)
            if t is not None and t != module and t != tuple(here[: len(t)]):
                out.add(t)
    # A module names its own submodules without a prefix (`health::router()`).
    for name in {k[len(module)] for k in known if len(k) == len(module) + 1 and k[: len(module)] == module}:
        if re.search(rf"(?<![\w:]){name}::", text):
            out.add(module + (name,))
    return out


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan, iteratively)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    n = stack.pop()
                    on.discard(n)
                    group.append(n)
                    if n == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    bad = 0
    for src in sorted(root.glob("crates/*/src")):
        known = modules(src)
        graph = {m: edges(m, f, known) for m, f in known.items()}
        for group in cycles(graph):
            bad += 1
            names = ", ".join("/".join(m) or "lib" for m in group)
            print(f"{src.parent.name}: {names}")
    if bad:
        print(f"{bad} module cycle(s)", file=sys.stderr)
        return 1
    print("no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
