#!/usr/bin/env bash
# The external suites of docs/suites/ against a fresh sufs mount, for the long runs the docs
# report (CI runs the short ones: tests/suites.rs). Run as root from the repository, after
# `cargo build --release`, `cargo install pjdfstest --version 0.2.2 --locked`,
# `cargo install fsx --version 0.3.2 --locked` and `apt-get install -y stress-ng`.
#
#   scripts/suites.sh pjdfstest [softdep|sync|async]   the whole suite, then the EROFS tests alone
#   scripts/suites.sh fsx [OPS] [SEED] [ORDERING]      one long fsx run (default 250000 ops, seed 20240601)
#   scripts/suites.sh fsx-par [N] [OPS] [SEED] [ORDERING]
#                                                    N fsx processes at once on one mount (default 3), each
#                                                    on its own file with seed SEED+i; after the unmount and
#                                                    fsck, a remount must show every file unchanged
#   scripts/suites.sh stress [SECONDS] [ORDERING]      stress-ng's file-system stressors in parallel
#
# Each ends with `sufs umount` and `sufs fsck`, whose exit status is the script's. SUFS_MOUNT_OPTS adds
# mount options (`SUFS_MOUNT_OPTS=permissions=sufs scripts/suites.sh pjdfstest`: sufs checks permissions).
set -euo pipefail
SUFS=${SUFS:-$(pwd)/target/release/sufs}
DOCS=$(pwd)/docs/suites
W=$(mktemp -d /var/tmp/sufs-suites.XXXX)
chmod 755 "$W"   # pjdfstest switches to unprivileged users, who must reach the mount
trap 'umount -l "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
what=${1:?usage: scripts/suites.sh pjdfstest|fsx|fsx-par|stress ...}
shift

# SUFS_MOUNT_OPTS: `-o` for every mount (e.g. writeback_cache).
OPTS=(${SUFS_MOUNT_OPTS:+-o "$SUFS_MOUNT_OPTS"})
mount_fresh() {
  "$SUFS" mkfs "$W/img" --size "$1" >/dev/null
  "$SUFS" mount "$W/img" "$W/mnt" --ordering "$2" "${OPTS[@]}"
}
unmount_fsck() {
  "$SUFS" umount "$W/mnt"
  tail -1 "$W/img.log"
  "$SUFS" fsck "$W/img"
}

date -u +"%F %T UTC"; "$SUFS" --version 2>/dev/null || true; git rev-parse --short HEAD 2>/dev/null || true
echo "mount options: ${SUFS_MOUNT_OPTS:-(defaults)}"
case $what in
pjdfstest)
  ord=${1:-softdep}
  mount_fresh 1G "$ord"
  mkdir -p "$W/second"
  sed 's/allow_remount = false/allow_remount = true/' "$DOCS/pjdfstest.toml" > "$W/remount.toml"
  pjdfstest --version
  pjdfstest -c "$DOCS/pjdfstest.toml" -p "$W/mnt" -s "$W/second" | grep -E "FAILED|skipped|Summary" -A1 || true
  # pjdfstest remounts with mount(8), which, where fuse3 is installed, hands a fuse.sufs mount to
  # mount.fuse3, and that cannot remount; `mount -i` keeps it to mount(2) (as tests/suites.rs).
  mkdir -p "$W/bin"
  printf '#!/bin/sh\nexec /bin/mount -i "$@"\n' > "$W/bin/mount"
  chmod 755 "$W/bin/mount"
  PATH="$W/bin:$PATH" pjdfstest -c "$W/remount.toml" -p "$W/mnt" -s "$W/second" erofs | grep -E "FAILED|Summary" -A1 || true
  unmount_fsck
  ;;
fsx)
  ops=${1:-250000} seed=${2:-20240601} ord=${3:-softdep}
  mount_fresh 1G "$ord"
  fsx --version
  s=$(date +%s)
  fsx -f "$DOCS/fsx.toml" -N "$ops" -S "$seed" -P "$W" "$W/mnt/fsxfile" 2>&1 | tail -3
  echo "fsx: $ops operations, seed $seed, $ord, $(( $(date +%s) - s )) s"
  unmount_fsck
  ;;
fsx-par)
  n=${1:-3} ops=${2:-100000} seed=${3:-20240601} ord=${4:-softdep}
  mount_fresh 1G "$ord"
  fsx --version
  s=$(date +%s)
  pids=()
  for i in $(seq 1 "$n"); do
    mkdir -p "$W/fsx$i"
    fsx -f "$DOCS/fsx.toml" -N "$ops" -S $((seed + i)) -P "$W/fsx$i" "$W/mnt/fsxfile$i" >"$W/fsx$i/out" 2>&1 &
    pids+=($!)
  done
  failed=0
  for i in $(seq 1 "$n"); do
    if wait "${pids[i - 1]}" && grep -q "All operations completed A-OK!" "$W/fsx$i/out"; then
      echo "fsx $i (seed $((seed + i))): ok"
    else
      echo "FAILED: fsx $i (seed $((seed + i))) on $ord; its last lines:"
      tail -25 "$W/fsx$i/out"
      failed=1
    fi
  done
  echo "fsx-par: $n processes x $ops operations, seeds $((seed + 1))..$((seed + n)), $ord, $(( $(date +%s) - s )) s"
  (cd "$W/mnt" && sha256sum fsxfile*) >"$W/sums" || failed=1
  unmount_fsck
  "$SUFS" mount "$W/img" "$W/mnt" --ordering "$ord" "${OPTS[@]}"
  (cd "$W/mnt" && sha256sum --quiet -c "$W/sums") || { echo "FAILED: a file changed across the remount" >&2; failed=1; }
  "$SUFS" umount "$W/mnt"
  if [ "$failed" != 0 ]; then
    echo "fsx-par: FAILED" >&2
    exit 1
  fi
  ;;
stress)
  secs=${1:-120} ord=${2:-softdep}
  mount_fresh 4G "$ord"
  chmod 1777 "$W/mnt"
  stress-ng --version
  stress-ng --temp-path "$W/mnt" --timeout "${secs}s" --verify --metrics-brief \
    --dentry 2 --dir 2 --dirmany 1 --rename 2 --link 2 --symlink 2 --hdd 2 --hdd-bytes 32M \
    --iomix 2 --iomix-bytes 32M --filename 1 --touch 2 --copy-file 1 --copy-file-bytes 128M \
    --chmod 1 --utime 1 2>&1 | grep -vE "^stress-ng: metrc: .*(nanosecs|% of time|MB/sec|calls per sec|MB per sec)"
  unmount_fsck
  ;;
*) echo "unknown suite $what" >&2; exit 2 ;;
esac
