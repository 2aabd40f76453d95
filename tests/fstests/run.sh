#!/bin/bash
# Runs fstests against sufs (set up by setup.sh) and writes a summary: each test passed, failed
# (with the reason, from its .out.bad or check's verdict), not run (with fstests' reason) or
# killed at the time limit; after each ./check call it unmounts and waits for the daemons, and
# at the end runs `sufs fsck` on both images (fstests runs no fsck for FUSE).
#
# usage: run.sh [-g GROUP] [-l LIST] [-x LIST]... [-t SECONDS] [-c CHUNK] [-o OUTDIR] [TEST...]
#   -g GROUP    a group as ./check takes it, e.g. generic/quick (the default without -l or TESTs)
#   -l LIST     a file of tests, one a line (# comments); "TEST xfail: REASON" marks a test the
#               build is known to fail: its failure is reported, not counted (and its passing
#               is reported too)
#   -x LIST     take only the xfail marks of LIST (any number of -x), for a group's run
#   -t SECONDS  per-test limit (default 300): the test is killed, and if it does not die the
#               FUSE connections of its mounts are aborted
#   -c CHUNK    tests per ./check call (default 20; ./check unmounts and remounts between calls)
#   -o OUTDIR   where the logs and summary go (default: $WORK/results/DATE-ORDERING)
# A test during which a daemon logged an error (a line matching LOG_ERRORS, an extended regular
# expression: an ERROR line, a panic, dependencies that did not drain, damage found) fails, with
# those lines as its reason, even where fstests saw nothing wrong.
# Environment: XFSTESTS and WORK as for setup.sh; UNMOUNT_WAIT (default 300): seconds a daemon
# has to finish after the mounts are unmounted at the end of each ./check call (else it is
# killed, and that counts against the call's tests); MAX_RSS_MB (default 2048): a daemon of the
# two images past this size is killed, so that a runaway one cannot take the machine's memory
# (and that counts against the test running then).
# Exit: 0 when nothing failed unexpectedly (a test, or a daemon that did not finish after a call
# of tests not all marked xfail), fsck finds no violation on either image at the end (leaks a
# shutdown test left are allowed) and every mount was served by $SUFS (local.config's build);
# 1 otherwise;
# 2 for a usage or setup error.
set -uo pipefail

WORK=${WORK:-/var/tmp/sufs-fstests}
XFSTESTS=${XFSTESTS:-$WORK/xfstests}
GROUP="" LIST="" PER_TEST=300 CHUNK=20 OUTDIR=""
XLISTS=()
usage() { sed -n '7,29p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "g:l:x:t:c:o:h" o; do
  case $o in
    g) GROUP=$OPTARG;; l) LIST=$OPTARG;; t) PER_TEST=$OPTARG;; c) CHUNK=$OPTARG;; o) OUTDIR=$OPTARG;;
    x) XLISTS+=("$(realpath "$OPTARG")") || exit 2; [ -f "${XLISTS[-1]}" ] || usage;;
    *) usage;;
  esac
done
shift $((OPTIND - 1))
[ -f "$XFSTESTS/local.config" ] || { echo "run.sh: no $XFSTESTS/local.config: run setup.sh first" >&2; exit 2; }
[ -n "$LIST" ] && { LIST=$(realpath "$LIST") || exit 2; }
# shellcheck source=/dev/null
. "$XFSTESTS/local.config"
ORDERING=$(echo "$MOUNT_OPTIONS" | grep -o 'ordering=[a-z]*' | cut -d= -f2)
OUTDIR=${OUTDIR:-$WORK/results/$(date +%Y%m%d-%H%M%S)-${ORDERING:-softdep}}
mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(realpath "$OUTDIR")
# A directory used before starts over.
rm -rf "$OUTDIR/results" "$OUTDIR"/{check.out,check.last,list,daemons,timeouts,current,unexpected,summary.txt,run.log,foreign,logmarks,logerrors,peakrss} "$OUTDIR"/chunk.*
export RESULT_BASE=$OUTDIR/results
cd "$XFSTESTS" || exit 2

# The tests, and those expected to fail (test -> reason).
declare -A XFAIL=()
xfails() {  # xfails LIST [TESTS-FILE]: LIST's xfail marks, and its tests into TESTS-FILE
  local t rest
  while read -r t rest; do
    t=${t%%#*}
    [ -z "$t" ] && continue
    [ -n "${2:-}" ] && echo "$t" >> "$2"
    case $rest in xfail:*) XFAIL[$t]=$(echo "${rest#xfail:}" | sed 's/^ *//');; esac
  done < "$1"
}
for x in "${XLISTS[@]}"; do xfails "$x"; done
: > "$OUTDIR/list"
if [ -n "$LIST" ]; then
  xfails "$LIST" "$OUTDIR/list"
elif [ $# -gt 0 ]; then
  printf '%s\n' "$@" > "$OUTDIR/list"
else
  ./check -n -g "${GROUP:-generic/quick}" 2>/dev/null | grep -Eo '^[a-z0-9]+/[0-9]+' > "$OUTDIR/list"
fi
total=$(wc -l < "$OUTDIR/list")
[ "$total" -gt 0 ] || { echo "run.sh: no tests to run" >&2; exit 2; }
start=$(date +%s)
declare -A LOGAT=()  # where each image's log stood before the run
for dev in "$TEST_DEV" "$SCRATCH_DEV"; do LOGAT[$dev]=$(stat -c %s "${dev#sufs:}.log" 2>/dev/null || echo 0); done
log() { echo "$(date +%T) $*" | tee -a "$OUTDIR/run.log"; }
# What in a daemon's log counts as an error (the default's parts: env_logger's ERROR level, a
# panic, soft updates' "dependencies did not drain", `Fs::damaged`'s "damaged:", a daemon whose
# FUSE session ended other than by its unmount, e.g. its connection aborted).
LOG_ERRORS=${LOG_ERRORS:-' ERROR |panicked|did not drain|damaged: |FUSE session ended with an error'}
logsize() { stat -c %s "${1#sufs:}.log" 2>/dev/null || echo 0; }
# Where both logs stood as each test began (`logmarks`: TEST OFFSET OFFSET), from the name
# ./check prints as it starts a test; the first test of a call is marked before the call.
markstart() { echo "$1 $(logsize "$TEST_DEV") $(logsize "$SCRATCH_DEV")" >> "$OUTDIR/logmarks"; }
marker() {  # marker FIRST: follows check.last while ./check runs
  local last=$1 t
  while sleep 1; do
    t=$(grep -Eo '^[a-z0-9]+/[0-9]+' "$OUTDIR/check.last" 2>/dev/null | tail -1)
    [ -n "$t" ] && [ "$t" != "$last" ] && { markstart "$t"; last=$t; }
  done
}
# After a call (its mounts unmounted, so the unmounts' lines count for its last test): the
# error lines each test's window of the logs holds go to `logerrors` (TEST : LINE).
logerrors() {
  local t a b next na nb
  [ -s "$OUTDIR/logmarks" ] || return 0
  while read -r t a b; do
    next=$(grep -A1 -E "^$t " "$OUTDIR/logmarks" | sed -n 2p)
    if [ -n "$next" ]; then read -r _ na nb <<< "$next"; else na=$(logsize "$TEST_DEV") nb=$(logsize "$SCRATCH_DEV"); fi
    { tail -c +$((a + 1)) "${TEST_DEV#sufs:}.log" 2>/dev/null | head -c $((na - a))
      tail -c +$((b + 1)) "${SCRATCH_DEV#sufs:}.log" 2>/dev/null | head -c $((nb - b)); } |
      grep -aE "$LOG_ERRORS" | cut -c1-300 | sed "s|^|$t : |" >> "$OUTDIR/logerrors"
  done < "$OUTDIR/logmarks"
  rm -f "$OUTDIR/logmarks"
}
log "$total tests, ordering ${ORDERING:-softdep}, limit ${PER_TEST}s a test; output in $OUTDIR"

# Watchdog: a test script running past the limit is killed with what it started; if it is still
# there 30 s later (stuck in a FUSE request), its mounts' FUSE connections are aborted.
descendants() { local p; for p in $(ps -o pid= --ppid "$1"); do echo "$p"; descendants "$p"; done; }
# Whether a process descends from this run (another run's tests, on other images, are its own
# watchdog's: killing them here, and aborting this run's connections for them, aborted mounts
# that served nothing late).
ours() {  # ours PID
  local p=$1
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    [ "$p" = "$$" ] && return 0
    p=$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')
  done
  return 1
}
MAX_RSS_MB=${MAX_RSS_MB:-2048}
watchdog() {
  while sleep 5; do
    # The daemons must be this build (mount(8)'s helper is one for the machine; local.config's
    # SUFS_MOUNT_HELPER hands the calls to $SUFS, but a helper too old to know it does not).
    for pid in $(ps -eo pid=,args= | awk -v t="${TEST_DEV#sufs:}" -v s="${SCRATCH_DEV#sufs:}" '$2 ~ /sufs$/ && $3 == "mount" && ($4 == t || $4 == s) {print $1}'); do
      exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue  # (gone meanwhile)
      exe=$(realpath -m "${exe% (deleted)}")
      [ "$exe" = "$(realpath "$SUFS")" ] || grep -qxF "$exe" "$OUTDIR/foreign" 2>/dev/null || echo "$exe" >> "$OUTDIR/foreign"
    done
    # The largest daemon seen so far (sampled every 5 s), and the test it was serving.
    peak=$(ps -eo rss=,args= | awk -v t="${TEST_DEV#sufs:}" -v s="${SCRATCH_DEV#sufs:}" \
      '$2 ~ /sufs$/ && $3 == "mount" && ($4 == t || $4 == s) && $1 > m {m = $1} END {print m + 0}')
    if [ "$peak" -gt "$(cut -d' ' -f1 "$OUTDIR/peakrss" 2>/dev/null || echo 0)" ]; then
      echo "$peak $(cat "$OUTDIR/current" 2>/dev/null)" > "$OUTDIR/peakrss"
    fi
    ps -eo pid=,rss=,args= | awk -v max=$((MAX_RSS_MB * 1024)) -v t="${TEST_DEV#sufs:}" -v s="${SCRATCH_DEV#sufs:}" \
      '$3 ~ /sufs$/ && $4 == "mount" && ($5 == t || $5 == s) && $2 > max {print $1, $2, $5}' |
    while read -r pid rss img; do
      echo "$(date +%T) RUNAWAY sufs daemon of $img: ${rss} KiB: killed" >> "$OUTDIR/run.log"
      echo "$(cat "$OUTDIR/current" 2>/dev/null) : daemon of $(basename "$img") killed at $((rss / 1024)) MiB" >> "$OUTDIR/daemons"
      kill -KILL "$pid"
    done
    ps -eo pid=,etimes=,args= | awk '$3 ~ /(^|\/)bash$/ && $4 ~ /tests\/[a-z]+\/[0-9]+$/ {print $1, $2, $4}' |
    while read -r pid et t; do
      ours "$pid" || continue
      t=$(echo "$t" | grep -Eo '[a-z0-9]+/[0-9]+$')
      echo "$t" > "$OUTDIR/current"
      # (ps has been seen to give a process just started an elapsed time of 130 years)
      [ "$et" -gt "$PER_TEST" ] && [ "$et" -lt 1000000 ] || continue
      echo "$t" >> "$OUTDIR/timeouts"
      echo "$(date +%T) TIMEOUT $t after ${et}s: killing it" >> "$OUTDIR/run.log"
      kill -TERM $(descendants "$pid") "$pid" 2>/dev/null
      sleep 30
      kill -0 "$pid" 2>/dev/null || continue
      echo "$(date +%T) $t still alive: aborting the FUSE connections" >> "$OUTDIR/run.log"
      for m in "$SCRATCH_MNT" "$TEST_DIR"; do
        dev=$(mountpoint -d "$m" 2>/dev/null | cut -d: -f2)
        [ -n "$dev" ] && [ -e "/sys/fs/fuse/connections/$dev/abort" ] && echo 1 > "/sys/fs/fuse/connections/$dev/abort"
      done
      kill -KILL $(descendants "$pid") "$pid" 2>/dev/null
    done
  done
}
watchdog & WD=$!
trap 'kill $WD 2>/dev/null' EXIT

# After each ./check call both mounts are unmounted and their daemons must finish (write
# everything, let go of the image) within UNMOUNT_WAIT seconds; one that does not is killed, its
# image repaired (fsck -y) so that the next tests start clean, and that is held against the
# tests of the call (expected when they are all marked xfail).
UNMOUNT_WAIT=${UNMOUNT_WAIT:-300}
settle() {  # settle TESTS...: unmount, wait, judge
  local m dev img pids out
  for m in "$TEST_DIR" "$SCRATCH_MNT"; do
    # A daemon that died leaves its mount behind ("Transport endpoint is not connected").
    if ! stat "$m" >/dev/null 2>&1; then log "$m is dead: unmounting it"; umount -l "$m"; fi
    if findmnt -rn "$m" >/dev/null; then umount "$m" || umount -l "$m"; fi
  done
  for dev in "$TEST_DEV" "$SCRATCH_DEV"; do
    img=${dev#sufs:}
    if ! timeout "$UNMOUNT_WAIT" flock -x "$img" true; then
      pids=$(ps -eo pid=,args= | awk -v i="$img" '$2 ~ /sufs$/ && $3 == "mount" && $4 == i {print $1}')
      [ -n "$pids" ] && kill -KILL $pids
      sleep 1
      out=$("$SUFS" fsck -y "$img" 2>&1 | tail -1)
      log "the daemon of $(basename "$img") had not finished ${UNMOUNT_WAIT}s after unmount: killed; fsck -y: $out"
      echo "$* : daemon of $(basename "$img") did not finish its unmount in ${UNMOUNT_WAIT}s (killed; fsck -y: $out)" >> "$OUTDIR/daemons"
    fi
    preen "$img" "$@"
  done
}
# An image its tests left unclean (a shutdown test's crash; under sync and async a mount then
# refuses it until fsck has run) is preened, as a boot-time `fsck -p` would: leaks and link
# counts too high are what a crash may leave. Anything more is held against the tests.
preen() {  # preen IMAGE TESTS...
  local img=$1 out rc
  shift
  out=$("$SUFS" fsck -p "$img" 2>&1); rc=$?
  case $rc in
    0) ;;
    1) log "$(basename "$img") was left unclean; fsck -p: $(echo "$out" | tail -1)";;
    *) out=$("$SUFS" fsck -y "$img" 2>&1 | tail -1)
       log "$(basename "$img") needed more than preening (fsck -p exit $rc); fsck -y: $out"
       echo "$* : $(basename "$img") needed more than preening after them (fsck -p exit $rc; fsck -y: $out)" >> "$OUTDIR/daemons";;
  esac
}
# A ./check call that gave no verdict at all stopped before its first test (a mount it could
# not make, a missing program): what it printed goes to the output, not only to check.out.
verdicts() { grep -cE '^[a-z0-9]+/[0-9]+ ' "$1"; }

# Chunks of CHUNK tests; a test marked xfail runs alone, so that what it leaves is its own.
n=0 k=0
while read -r t; do
  if [ -n "${XFAIL[$t]:-}" ]; then
    echo "$t" > "$OUTDIR/chunk.x${t//\//-}"; continue
  fi
  [ $((n % CHUNK)) = 0 ] && k=$((k + 1))
  echo "$t" >> "$OUTDIR/chunk.$(printf %04d $k)"
  n=$((n + 1))
done < "$OUTDIR/list"
# Images an earlier run left unclean are preened before the first test.
for dev in "$TEST_DEV" "$SCRATCH_DEV"; do preen "${dev#sufs:}" "(before the run)"; done
for c in "$OUTDIR"/chunk.*; do
  [ -e "$c" ] || continue
  log "$(head -1 "$c") .. $(tail -1 "$c")"
  : > "$OUTDIR/check.last"
  markstart "$(head -1 "$c")"
  marker "$(head -1 "$c")" & MK=$!
  # shellcheck disable=SC2046
  ./check $(cat "$c") > "$OUTDIR/check.last" 2>&1
  kill $MK 2>/dev/null; wait $MK 2>/dev/null
  cat "$OUTDIR/check.last" >> "$OUTDIR/check.out"
  if [ "$(verdicts "$OUTDIR/check.last")" = 0 ]; then
    log "./check stopped before its first test; it printed:"
    tail -15 "$OUTDIR/check.last" | sed 's/^/    /' | tee -a "$OUTDIR/run.log"
    tail -5 "$RESULT_BASE/check.full" 2>/dev/null | sed 's/^/    check.full: /' | tee -a "$OUTDIR/run.log"
  fi
  settle $(cat "$c")
  logerrors
  rm -f "$c"
done
kill $WD 2>/dev/null

# Verdicts: check's last line for each test ("TEST 3s ...", "[not run] why", "- output mismatch").
declare -A VERDICT=() WHY=()
while IFS= read -r line; do
  t=$(echo "$line" | grep -Eo '^[a-z0-9]+/[0-9]+') || continue
  rest=${line#"$t"}
  if [[ $rest == *"[not run]"* ]]; then
    VERDICT[$t]=notrun; WHY[$t]=$(echo "${rest#*\[not run\] }" | sed 's/^ *//')
  elif [[ $rest == *"[expunged]"* ]]; then
    VERDICT[$t]=notrun; WHY[$t]="expunged"
  elif [[ $rest == *"output mismatch"* || $rest == *"[failed"* || $rest == *"_check_"* ]]; then
    VERDICT[$t]=fail; WHY[$t]=$(echo "$rest" | sed -e 's/^ *//' -e "s|(see $RESULT_BASE/[^)]*)||")
  elif [[ $rest =~ [0-9]+s ]]; then
    VERDICT[$t]=pass
  fi
done < "$OUTDIR/check.out"
reason() {  # the first lines that differ from the golden output
  local t=$1 bad="$RESULT_BASE/$1.out.bad"
  if [ -f "$bad" ]; then
    diff "tests/$t.out" "$bad" 2>/dev/null | grep -E '^[<>]' | head -4 | cut -c1-160 | tr '\n' ' ' | sed 's/ *$//'
  fi
}

{
  declare -A N=([pass]=0 [fail]=0 [notrun]=0 [xfail]=0 [xpass]=0 [timeout]=0)
  unexpected=0
  lines=()
  while read -r t; do
    v=${VERDICT[$t]:-fail}
    why=${WHY[$t]:-"no verdict from check (killed or interrupted)"}
    if grep -qx "$t" "$OUTDIR/timeouts" 2>/dev/null; then v=timeout; why="killed after ${PER_TEST}s"; fi
    if [ "$v" = fail ]; then r=$(reason "$t"); [ -n "$r" ] && why="$why: $r"; fi
    # A daemon's error lines during the test fail it, whatever fstests saw.
    errs=$(grep -F "$t : " "$OUTDIR/logerrors" 2>/dev/null | sed "s|^$t : ||")
    if [ -n "$errs" ] && [ "$v" != notrun ]; then
      [ "$v" = pass ] && { v=fail; why="daemon log"; } || why="$why; daemon log"
      why="$why: $(echo "$errs" | wc -l) error lines: $(echo "$errs" | head -3 | tr '\n' ' ' | sed 's/ *$//')"
    fi
    if [ -n "${XFAIL[$t]:-}" ]; then
      case $v in fail|timeout) v=xfail; why="expected (${XFAIL[$t]}): $why";; pass) v=xpass; why="passes although marked xfail (${XFAIL[$t]})";; esac
    fi
    N[$v]=$((N[$v] + 1))
    case $v in fail|timeout) unexpected=$((unexpected + 1));; esac
    [ "$v" = pass ] || lines+=("$(printf '%-8s %-12s %s' "$v" "$t" "$why" | cut -c1-400)")
  done < "$OUTDIR/list"
  echo "fstests on sufs (${ORDERING:-softdep}), $(date -d @"$start" '+%F %T'), $(( ($(date +%s) - start) / 60 )) min"
  echo "$total tests: ${N[pass]} passed, ${N[fail]} failed, ${N[timeout]} timed out, ${N[notrun]} not run, ${N[xfail]} failed as expected, ${N[xpass]} passed although expected to fail"
  printf '%s\n' "${lines[@]}"
  if [ -s "$OUTDIR/peakrss" ]; then
    read -r kib during < "$OUTDIR/peakrss"
    echo "largest daemon: $((kib / 1024)) MiB resident (sampled every 5 s; during ${during:-?})"
  fi
  # Daemons killed (not finished after their unmount, or past MAX_RSS_MB while the tests ran) and
  # images left needing more than preening:
  # expected only when every test named is marked xfail.
  if [ -s "$OUTDIR/daemons" ]; then
    while IFS= read -r line; do
      tests=${line%% : *} expected=1
      for t in $tests; do [ -n "${XFAIL[$t]:-}" ] || expected=0; done
      if [ $expected = 1 ]; then echo "xfail    $line"; else echo "FAIL     $line"; unexpected=$((unexpected + 1)); fi
    done < "$OUTDIR/daemons"
  fi
  echo "$unexpected" > "$OUTDIR/unexpected"
} > "$OUTDIR/summary.txt"

# fsck of both images (unmounted, their daemons done: `settle`).
fsck_bad=0
for dev in "$TEST_DEV" "$SCRATCH_DEV"; do
  img=${dev#sufs:}
  out=$("$SUFS" fsck "$img" 2>&1)
  echo "fsck $(basename "$img"): $(echo "$out" | tail -1)" >> "$OUTDIR/summary.txt"
  # Leaks and the like ("allowed") are what a crash leaves, and shutdown tests make crashes;
  # anything that breaks the on-disk rules fails the run.
  if ! echo "$out" | grep -q " 0 violations)"; then
    fsck_bad=1
    echo "$out" | head -20 >> "$OUTDIR/summary.txt"
  fi
  errs=$(tail -c +$((LOGAT[$dev] + 1)) "$img.log" 2>/dev/null | grep -iE 'panick|error' | tail -5)
  [ -n "$errs" ] && { echo "errors in $(basename "$img").log during the run (last 5):"; echo "$errs"; } >> "$OUTDIR/summary.txt"
done
if [ -s "$OUTDIR/foreign" ]; then
  echo "NOT THIS BUILD: mounts were served by $(tr '\n' ' ' < "$OUTDIR/foreign")(not $SUFS): /sbin/mount.fuse.sufs was changed during the run" >> "$OUTDIR/summary.txt"
  fsck_bad=1
fi
cat "$OUTDIR/summary.txt"
[ "$(cat "$OUTDIR/unexpected")" = 0 ] && [ $fsck_bad = 0 ]
