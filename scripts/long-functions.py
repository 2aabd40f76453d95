#!/usr/bin/env python3
"""Lists the functions under src/ longer than a limit (80 lines by default), longest first.

A function that is better whole says why in a comment line just above it (among its doc
comment and attributes) that begins `// Long:`; those are listed apart, with their reason.
Exit code 1 if a function over the limit gives no reason.

    scripts/long-functions.py [--limit N] [DIR]
"""
import pathlib
import re
import sys

FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|async\s+|unsafe\s+)*fn\s+(\w+)")


def functions(path):
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        indent = m.group(1)
        # The signature may run over several lines; a declaration without a body ends in ';'.
        j = i
        while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
            j += 1
        if j == len(lines) or lines[j].rstrip().endswith(";"):
            continue
        if lines[j].rstrip().endswith("{") and lines[j].strip().endswith("}"):
            continue
        end = j + 1
        while end < len(lines) and lines[end] != indent + "}":
            end += 1
        reason = None
        k = i - 1
        while k >= 0 and (lines[k].strip().startswith(("//", "#["))):
            s = lines[k].strip()
            if s.startswith("// Long:"):
                reason = s[len("// Long:"):].strip()
            k -= 1
        yield m.group(2), i + 1, end - i + 1, reason


def main():
    args = sys.argv[1:]
    limit = 80
    if args[:1] == ["--limit"]:
        limit = int(args[1])
        args = args[2:]
    root = pathlib.Path(args[0] if args else "src")
    long, kept = [], []
    for path in sorted(root.rglob("*.rs")):
        for name, line, n, reason in functions(path):
            if n > limit:
                (kept if reason else long).append((n, f"{path}:{line}", name, reason))
    for n, where, name, _ in sorted(long, reverse=True):
        print(f"{n:5} {where} {name}")
    if kept:
        print(f"-- over {limit} lines, kept whole:")
        for n, where, name, reason in sorted(kept, reverse=True):
            print(f"{n:5} {where} {name}: {reason}")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
