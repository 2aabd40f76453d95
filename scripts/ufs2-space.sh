#!/bin/bash
# The space the copy workload's tree of `sufs bench peers` takes on sufs's own format, on UFS2
# of three geometries, on kernel ext4 (loop device) and in a makefs image (docs/performance.md,
# "UFS2: space and speed"). Root (loop mount). Usage: scripts/ufs2-space.sh DIR SUFS
# (DIR holds the staged tree, the 1 GiB sparse images and the makefs image, about 600 MB).
set -e
dir=$1; sufs=$(realpath "$2")
cd "$dir"
# The tree as the bench copies it (copy_tree): /usr/include into t0 and /usr/share/doc into t1,
# regular files and directories only, names of at most 255 bytes, unreadable files left out.
rm -rf tree && mkdir -p tree/t0 tree/t1 mnt
python3 - <<'EOF'
import os
def copy(src, dst):
    for name in sorted(os.listdir(src)):
        p, t = os.path.join(src, name), os.path.join(dst, name)
        if len(name.encode()) > 255 or os.path.islink(p):
            continue
        if os.path.isdir(p):
            os.mkdir(t)
            copy(p, t)
        elif os.path.isfile(p):
            try:
                data = open(p, 'rb').read()
            except OSError:
                continue
            open(t, 'wb').write(data)
copy('/usr/include', 'tree/t0')
copy('/usr/share/doc', 'tree/t1')
EOF
used() { df --block-size=1K --output=used "$1" | tail -1 | tr -d ' '; }
row() { # NAME DIR USED-EMPTY
  local du u files dirs
  du=$(du -s --block-size=1K "$2" | cut -f1); u=$(used "$2")
  files=$(find "$2" -type f | wc -l)
  dirs=$(find "$2" -mindepth 1 -type d -not -name .snap -not -name lost+found | wc -l)
  echo "| $1 | $du | $3 | $u | $files | $dirs |"
}
echo "| file system | du -s KiB | df used empty | df used | files | dirs |"
for fmt in sufs 32768/4096 4096/4096 16384/2048; do
  rm -f img
  if [ $fmt = sufs ]; then "$sufs" mkfs img --size 1G >/dev/null
  else "$sufs" mkfs --ufs2 img --size 1G -b "${fmt%/*}" -f "${fmt#*/}" >/dev/null; fi
  "$sufs" mount img mnt >/dev/null
  u0=$(used mnt)
  cp -r tree/. mnt/
  "$sufs" sync mnt >/dev/null
  row "sufs on $fmt" mnt "$u0"
  "$sufs" umount mnt >/dev/null
  "$sufs" fsck -n img | tail -1 >&2
done
rm -f img; truncate -s 1G img; mkfs.ext4 -q -F img
mount -o loop img mnt
u0=$(used mnt)
cp -r tree/. mnt/; sync
row "kernel ext4" mnt "$u0"
umount mnt; rm -f img
makefs -t ffs -o version=2,bsize=32768,fsize=4096 mk.img tree >/dev/null
ls -s --block-size=1K mk.img >&2
"$sufs" fsck -n mk.img | tail -1 >&2 || true
"$sufs" mount -o ro mk.img mnt >/dev/null
row "makefs 32768/4096" mnt 0 || true
"$sufs" umount mnt >/dev/null
rm -rf mk.img tree mnt img.log mk.img.log
