#!/usr/bin/env python3
"""Import circles between the files of each crate of the workspace.

Reads every crate's src/ (its lib.rs or main.rs and the module files below), takes each file's
paths (`use crate::...`, `use super::...`, `crate::a::b` in code, brace groups expanded),
resolves each to the file of the longest module it names, and prints every ring of files that
import each other (a strongly connected component of more than one file). Exit 1 if any.

What is not counted: a module naming one of its ancestors (`use super::*` in a file that adds an
`impl Fs` block to its parent's type, `super::super::BS`): a child is part of its parent, and the
parent's `mod x;` is not an import. Everything else is: a parent using its child (`pub use
x::Y`, `x::f()`), siblings, cousins. So a ring through siblings is a ring even when it passes
through their parent. Inline `mod tests { ... }` blocks
belong to their file (their `super::` is the file itself). Usage: scripts/import-cycles.py [-v]
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def crates():
    """(name, src dir, root file) of each crate: crates/*/src and the root's src."""
    out = []
    cdir = os.path.join(ROOT, "crates")
    if os.path.isdir(cdir):
        for name in sorted(os.listdir(cdir)):
            src = os.path.join(cdir, name, "src")
            for root in ("lib.rs", "main.rs"):
                if os.path.exists(os.path.join(src, root)):
                    out.append((name + "/" + root, src, root))
    src = os.path.join(ROOT, "src")
    for root in ("lib.rs", "main.rs"):
        if os.path.exists(os.path.join(src, root)):
            out.append(("sufs/" + root, src, root))
    return out


def modules(src, root):
    """Module path (tuple) -> file, for the files under src reachable as modules."""
    mods = {(): os.path.join(src, root)}
    other_root = "main.rs" if root == "lib.rs" else "lib.rs"
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            if rel in (root, other_root):
                continue
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            mods[tuple(parts)] = os.path.join(dirpath, f)
    return mods


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return text


def expand(body):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    body = body.strip()
    i = body.find("{")
    if i < 0:
        return [body.split(" as ")[0].strip()]
    prefix, inner = body[:i], body[i + 1 : body.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            out += [prefix + q for q in expand(p)]
    return out


def paths_of(text):
    """(inline module depth, path) of every path the file names."""
    out = []
    depth_stack = []  # brace depth at which each inline `mod x {` opened
    depth = 0
    for m in re.finditer(r"\bmod\s+\w+\s*\{|[{}]|\buse\s+([^;]+);|(?<![\w:])((?:\w+)(?:::\w+)+)", text):
        tok = m.group(0)
        if tok.startswith("mod"):
            depth += 1
            depth_stack.append(depth)
        elif tok == "{":
            depth += 1
        elif tok == "}":
            if depth_stack and depth_stack[-1] == depth:
                depth_stack.pop()
            depth -= 1
        elif m.group(1):
            for p in expand(m.group(1)):
                out.append((len(depth_stack), p.replace(" ", "")))
        else:
            out.append((len(depth_stack), m.group(2)))
    return out


def resolve(mod, inline, path, mods):
    parts = path.split("::")
    if parts[0] == "crate":
        base, parts = [], parts[1:]
    elif parts[0] in ("super", "self"):
        base = list(mod)
        # `super` from inside an inline module is the file's module first
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                if inline > 0:
                    inline -= 1
                elif base:
                    base.pop()
            parts = parts[1:]
    elif tuple(mod) + (parts[0],) in mods and inline == 0:
        base = list(mod)  # a child module by its bare name
    else:
        return None
    full = base + [p for p in parts if p != "*"]
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in mods:
            return tuple(full[:n])
    return None


def main():
    verbose = "-v" in sys.argv
    rings = 0
    for name, src, root in crates():
        mods = modules(src, root)
        edges = {m: set() for m in mods}
        for mod, path in mods.items():
            with open(path) as f:
                text = strip(f.read())
            for inline, p in paths_of(text):
                t = resolve(mod, inline, p, mods)
                if t is None or t == mod:
                    continue
                if mod[: len(t)] == t:  # a module naming its ancestor
                    continue
                edges[mod].add(t)
        for ring in sccs(edges):
            rings += 1
            names = sorted(os.path.relpath(mods[m], ROOT) for m in ring)
            print(f"{name}: ring of {len(ring)}: " + ", ".join(names))
            if verbose:
                for m in sorted(ring):
                    for t in sorted(edges[m]):
                        if t in ring:
                            print(f"    {os.path.relpath(mods[m], ROOT)} -> {os.path.relpath(mods[t], ROOT)}")
    if rings == 0:
        print("no import rings")
    return 1 if rings else 0


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
