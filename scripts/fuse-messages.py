#!/usr/bin/env python3
"""FUSE messages per operation, counted by the mount itself (its control channel's `Stats`).

Run as root from the repository after `cargo build --release`:

    scripts/fuse-messages.py [FILES] [OPTS...]

FILES (default 10000) files are made in one directory, stated, opened and closed, missing
names stated twice each, the files stated again after a remount, listed with `ls -l` after a remount, and removed; each phase's messages
are printed per file, by opcode, with the phase's time, once for each mount option list OPTS (default: the kernel's
checks, `default_permissions`, and sufs's, `permissions=sufs`), all in the same run.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

SUFS = os.environ.get("SUFS", os.path.abspath("target/release/sufs"))


def sufs(*args):
    subprocess.run([SUFS, *args], check=True, stdout=subprocess.DEVNULL)


def counts(img):
    """The mount's message counts, by opcode."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(img + ".ctl")
        s.sendall(b'{"op":"stats"}\n')
        line = s.makefile().readline()
    return json.loads(line)["ok"]["stats"]["fuse_messages"]


def phase(img, name, n, work):
    """Runs `work` and prints its messages per file (opcodes with any)."""
    before = counts(img)
    start = time.monotonic()
    work()
    took = time.monotonic() - start
    after = counts(img)
    diff = {k: after[k] - before[k] for k in after if after[k] != before[k] and k not in ("forget_nlookup",)}
    total = sum(v for k, v in diff.items() if k != "forget_nodes")
    per = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(diff.items()))
    print(f"  {name:<22} {total / n:5.2f} per file in {took:6.2f} s: {per}")
    return total / n


def run(n, opts):
    with tempfile.TemporaryDirectory(dir="/var/tmp") as t:
        img, mnt = os.path.join(t, "img"), os.path.join(t, "mnt")
        sufs("mkfs", img, "--size", "1G")
        mount = lambda: sufs("mount", img, mnt, *(["-o", opts] if opts else []))
        mount()
        d = os.path.join(mnt, "d")
        os.mkdir(d)
        names = [os.path.join(d, f"f{i}") for i in range(n)]
        print(f"-o {opts or '(none)'}")

        def create():
            for p in names:
                os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))

        def stat():
            for p in names:
                os.stat(p)

        def stat_missing():
            for p in names:
                for _ in range(2):
                    try:
                        os.stat(p + ".missing")
                    except FileNotFoundError:
                        pass

        def open_close():
            for p in names:
                os.close(os.open(p, os.O_RDONLY))

        def unlink():
            for p in names:
                os.unlink(p)

        def remount():
            sufs("umount", mnt)
            mount()

        def ls():
            subprocess.run(["ls", "-l", d], check=True, stdout=subprocess.DEVNULL)

        phase(img, "create", n, create)
        phase(img, "stat (known name)", n, stat)
        phase(img, "open+close", n, open_close)
        phase(img, "stat missing name x2", n, stat_missing)
        remount()
        phase(img, "stat after remount", n, stat)
        remount()
        phase(img, "ls -l after remount", n, ls)
        phase(img, "unlink", n, unlink)
        sufs("umount", mnt)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    for opts in sys.argv[2:] or ["default_permissions", "permissions=sufs"]:
        run(n, opts)


if __name__ == "__main__":
    main()
