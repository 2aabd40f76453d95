#!/bin/bash
# Markdown tables from run.sh's results of one group in several orderings, for
# docs/suites/fstests.md: counts, every test not passed in some ordering with each ordering's
# result, not-run reasons with their tests, and the tests passed everywhere.
# usage: report.sh OUTDIR...   (each a run.sh -o directory; the ordering is read from its summary)
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: report.sh OUTDIR..." >&2; exit 2; }
declare -A RES=() WHY=()
names=()
tests=$(cat "$1/list")
for d in "$@"; do
  s=$d/summary.txt
  o=$(head -1 "$s" | sed -E 's/.*\(([a-z]+)\).*/\1/')
  names+=("$o")
  for t in $tests; do RES[$o,$t]=pass; done
  while read -r v t why; do
    case $v in pass|fail|notrun|timeout|xfail|xpass) RES[$o,$t]=$v; WHY[$o,$t]=$why;; esac
  done < <(tail -n +3 "$s" | grep -E '^(fail|notrun|timeout|xfail|xpass) ')
done

echo "| ordering | tests | passed | failed | not run | time |"
echo "| --- | --- | --- | --- | --- | --- |"
for d in "$@"; do
  s=$d/summary.txt
  o=$(head -1 "$s" | sed -E 's/.*\(([a-z]+)\).*/\1/')
  min=$(head -1 "$s" | grep -Eo '[0-9]+ min$')
  c=$(sed -n 2p "$s" | tr ':,' '\n\n' | sed 's/^ *//')
  n() { echo "$c" | grep -E "^[0-9]+ $1\$" | grep -Eo '^[0-9]+'; }
  echo "| $o | $(n tests) | $(n passed) | $(( $(n failed) + $(n 'timed out') )) | $(n 'not run') | $min |"
done

echo
echo "Not passed in some ordering:"
echo
printf '| test |'; printf ' %s |' "${names[@]}"; echo " what fstests saw |"
printf '| --- |'; printf ' --- |%.0s' "${names[@]}"; echo " --- |"
for t in $tests; do
  row="" any=0 why=""
  for o in "${names[@]}"; do
    v=${RES[$o,$t]}
    row+=" $v |"
    if [ "$v" != pass ] && [ "$v" != notrun ]; then any=1; why=${why:-${WHY[$o,$t]}}; fi
  done
  [ $any = 1 ] && echo "| $t |$row $(echo "$why" | cut -c1-150 | sed 's/|/\\|/g') |"
done

echo
echo "Not run, by fstests' reason (the same in every ordering unless marked):"
echo
echo "| reason | tests |"
echo "| --- | --- |"
o=${names[0]}
for t in $tests; do
  [ "${RES[$o,$t]}" = notrun ] && echo "${WHY[$o,$t]}|$t"
done | sed -E -e 's#/[^ ]*/xfstests/##g' -e 's#/[^ ]*/(test|scratch)\.img#IMAGE#g' -e 's#/[^ ]*/(test|scratch)( |$|[|])#\1 mount\2#g' | sort -t'|' -k1,1 -s |
  awk -F'|' '{ if ($1 != last) { if (NR > 1) print "| " last " | " list " |"; last = $1; list = "" }
              list = list (list == "" ? "" : " ") substr($2, 9) }
              END { if (NR) print "| " last " | " list " |" }'

echo
echo "Passed in every ordering:"
echo
for t in $tests; do
  all=1
  for o in "${names[@]}"; do [ "${RES[$o,$t]}" = pass ] || all=0; done
  [ $all = 1 ] && printf '%s ' "${t#generic/}"
done
echo
