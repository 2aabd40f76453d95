#!/bin/bash
# Sets up fstests (xfstests) against sufs: the Debian packages it needs, fstests built from its
# source tarball (with a local patch, fuse.patch), the users some tests need, the
# mount helper (`sufs install-helper`), a test and a scratch image, and local.config.
# Re-runnable: the packages and the fstests build are kept; the two images are made anew (an
# image left by an earlier run may hold its files, or need fsck after a crash, and a run must
# start from empty file systems). Stops at the first failure, saying where.
# Root only (packages, users, /sbin/mount.fuse.sufs). docs/suites/fstests.md tells the story.
#
# Variables (all optional):
#   XFSTESTS_TAR  fstests' source tarball (default: the first xfstests-*.tar.gz that
#                 `find -L .. -maxdepth 3` finds from the checkout)
#   XFSTESTS      where fstests is built         (default: /var/tmp/sufs-fstests/xfstests)
#   WORK          images and mount points        (default: /var/tmp/sufs-fstests)
#   IMG_SIZE      size of each image             (default: 2G)
#   ORDERING      softdep, sync or async, for both mounts (default: softdep)
#   FORMAT        ufs2 (FreeBSD's, as `sufs mkfs` makes it: the one format), for both images
#                 and every scratch file system a test makes (default: ufs2)
#   SUFS          the sufs binary the helper runs (default: this checkout's target/release/sufs,
#                 built with cargo)
#   SKIP_APT=1    install no packages
#   KEEP_IMAGES=1 keep images that are there (to look again at what a run left)
set -euo pipefail
trap 'echo "setup.sh: FAILED (line $LINENO): $BASH_COMMAND" >&2' ERR

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${WORK:-/var/tmp/sufs-fstests}
XFSTESTS=${XFSTESTS:-$WORK/xfstests}
IMG_SIZE=${IMG_SIZE:-2G}
ORDERING=${ORDERING:-softdep}
FORMAT=${FORMAT:-ufs2}
say() { echo "setup.sh: $*"; }
mkdir -p "$WORK"

[ "$(id -u)" = 0 ] || { echo "setup.sh: run as root (packages, users, /sbin/mount.fuse.sufs)" >&2; exit 1; }
case $ORDERING in softdep|sync|async) ;; *) echo "setup.sh: ORDERING=$ORDERING: softdep, sync or async" >&2; exit 1;; esac
case $FORMAT in ufs2) MKFS_ARGS=(--format ufs2) ;; *) echo "setup.sh: FORMAT=$FORMAT: only ufs2 (sufs's earlier format is retired)" >&2; exit 1;; esac

# 1. Packages: fstests' build and the programs its tests call (Debian 12 names).
if [ -z "${SKIP_APT:-}" ]; then
  pkgs=(build-essential autoconf automake libtool pkg-config uuid-dev xfslibs-dev libattr1-dev
        libacl1-dev libaio-dev liburing-dev libgdbm-dev libssl-dev xfsprogs attr acl bc dbench
        fio psmisc quota indent gawk fuse3 e2fsprogs util-linux procps)
  missing=()
  for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

# 2. fstests from its tarball, patched, built.
TAR=${XFSTESTS_TAR:-$(find -L "$REPO/.." -maxdepth 3 -name 'xfstests-*.tar.gz' -type f 2>/dev/null | sort | head -1)}
if [ ! -x "$XFSTESTS/check" ]; then
  [ -n "$TAR" ] && [ -f "$TAR" ] || { echo "setup.sh: no fstests tarball: set XFSTESTS_TAR (looked for xfstests-*.tar.gz below $REPO/..)" >&2; exit 1; }
  say "extracting $TAR into $XFSTESTS"
  mkdir -p "$XFSTESTS"
  tar -xzf "$TAR" -C "$XFSTESTS" --strip-components=1
fi
# The local patch (fuse.patch): _scratch_mkfs_sized asks sufs's helper for the size (mkfs_size=),
# a mount of type fuse.sufs counts as FSTYP=fuse, and _scratch_shutdown passes godown's flag
# through sufs's control channel. A tree patched by another version of it gets common/rc anew
# from the tarball first.
if ! cmp -s "$HERE/fuse.patch" "$XFSTESTS/.sufs-fuse.patch"; then
  if grep -q 'mkfs_size=' "$XFSTESTS/common/rc"; then
    [ -n "$TAR" ] && [ -f "$TAR" ] || { echo "setup.sh: common/rc carries another fuse.patch and no tarball was found to restore it (XFSTESTS_TAR)" >&2; exit 1; }
    tar -xzf "$TAR" -C "$XFSTESTS" --strip-components=1 --wildcards '*/common/rc'
  fi
  patch -d "$XFSTESTS" -p1 --forward < "$HERE/fuse.patch"
  cp "$HERE/fuse.patch" "$XFSTESTS/.sufs-fuse.patch"
fi
if [ ! -x "$XFSTESTS/ltp/fsstress" ]; then
  say "building fstests (a few minutes)"
  make -C "$XFSTESTS" -j"$(nproc)" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; echo "setup.sh: fstests build failed (log: $WORK/build.log)" >&2; exit 1; }
fi

# 3. The users some tests need (without them they are not run).
getent group fsgqa >/dev/null || groupadd fsgqa
id fsgqa >/dev/null 2>&1 || useradd -m -g fsgqa fsgqa
id fsgqa2 >/dev/null 2>&1 || useradd -m fsgqa2
id 123456-fsgqa >/dev/null 2>&1 || useradd -m 123456-fsgqa

# 4. sufs, and the helper mount(8) runs for `-t fuse.sufs`.
if [ -z "${SUFS:-}" ]; then
  say "building sufs (cargo build --release)"
  (cd "$REPO" && cargo build --release --quiet)
  SUFS=$REPO/target/release/sufs
fi
SUFS=$(realpath "$SUFS")
"$SUFS" install-helper

# 5. Images (unmounted first if a previous run left them mounted), mount points, local.config.
mkdir -p "$WORK/test" "$WORK/scratch"
for m in "$WORK/test" "$WORK/scratch"; do
  if findmnt -rn "$m" >/dev/null; then
    "$SUFS" umount "$m" || { findmnt -rn "$m" >/dev/null && umount -l "$m"; } || true
  fi
done
for img in test scratch; do
  [ -n "${KEEP_IMAGES:-}" ] && [ -e "$WORK/$img.img" ] && continue
  rm -f "$WORK/$img.img" "$WORK/$img.img.log"
  "$SUFS" mkfs "${MKFS_ARGS[@]}" "$WORK/$img.img" --size "$IMG_SIZE" >/dev/null
done
# The scratch mount carries mkfs_size=IMG_SIZE: a test that made a smaller scratch file system
# (_scratch_mkfs_sized, patched to ask for mkfs_size=N) leaves the next one a full-size one.
# Under sync and async an unclean image (a shutdown test's) is refused until fsck, as FFS's is:
# the mounts preen it first, as a boot would (fsck -p), so that a test can remount at once.
EXTRA=""
[ "$ORDERING" = softdep ] || EXTRA=",preen"
cat > "$XFSTESTS/local.config" <<EOC
# Written by sufs's tests/fstests/setup.sh.
export FSTYP=fuse
export FUSE_SUBTYP=.sufs
export TEST_DEV=sufs:$WORK/test.img
export TEST_DIR=$WORK/test
export SCRATCH_DEV=sufs:$WORK/scratch.img
export SCRATCH_MNT=$WORK/scratch
export TEST_FS_MOUNT_OPTS="-o ordering=$ORDERING$EXTRA"
export MOUNT_OPTIONS="-o mkfs_size=$IMG_SIZE,mkfs_format=$FORMAT,ordering=$ORDERING$EXTRA"
export SUFS=$SUFS
# /sbin/mount.fuse.sufs is one for the machine; it hands the mounts of these tests to this build.
export SUFS_MOUNT_HELPER=$SUFS
EOC
say "ready: $XFSTESTS/local.config (ordering $ORDERING, $FORMAT images of $IMG_SIZE in $WORK)"
