#!/usr/bin/env bash
# The stall a burst of delayed writes causes (Mogul 1994's subject), through the mount: write
# 600 MB without fsync, then create a 100-byte file every 10 ms for 45 s and report the latency
# of those creates (median, p99, max, and how many took over 100 ms).
#   scripts/bench-stall.sh [SUFS_BINARY [CACHE]]     (defaults: target/release/sufs, 1G)
# Run two binaries one after the other to compare them on the same machine.
set -euo pipefail
B=${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release/sufs}
CACHE=${2:-1G}
D=$(mktemp -d /var/tmp/sufs-stall.XXXXXX)
trap '"$B" umount "$D/mnt" >/dev/null 2>&1 || true; rm -rf "$D"' EXIT
mkdir -p "$D/mnt"
"$B" mkfs "$D/img" --size 3G >/dev/null
"$B" mount "$D/img" "$D/mnt" --cache "$CACHE" >/dev/null
dd if=/dev/zero of="$D/mnt/big" bs=1M count=600 status=none
python3 - "$D/mnt" 45 <<'PY'
import os, sys, time, statistics
mnt, secs = sys.argv[1], float(sys.argv[2])
lat, start, i = [], time.time(), 0
while time.time() < start + secs:
    t = time.perf_counter()
    fd = os.open(f"{mnt}/probe-{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"x" * 100)
    os.close(fd)
    lat.append(time.perf_counter() - t)
    if lat[-1] > 0.1:
        print(f"stall of {lat[-1] * 1e3:.0f} ms at {time.time() - start:.1f} s", flush=True)
    i += 1
    time.sleep(0.01)
lat.sort()
print(f"{len(lat)} creates: median {statistics.median(lat) * 1e3:.2f} ms, p99 {lat[int(len(lat) * 0.99)] * 1e3:.1f} ms, "
      f"max {lat[-1] * 1e3:.1f} ms; over 100 ms: {sum(l > 0.1 for l in lat)}")
PY
