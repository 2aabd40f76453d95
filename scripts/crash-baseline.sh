#!/usr/bin/env bash
# The crash tester's summaries of every workload, three orderings, a dozen seeds: a fingerprint
# of behaviour. Record it before a change that must not alter behaviour (a restructure), and
# compare after:   scripts/crash-baseline.sh > before.txt; ...; scripts/crash-baseline.sh | diff before.txt -
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
for ordering in softdep sync async; do
  for seed in $(seq 1 12); do
    # exit 1 means violations (async's are expected): the summary is what counts
    ./target/release/sufs crashtest --ordering "$ordering" --workload all --seed "$seed" --ops 80 2>/dev/null || [ $? -eq 1 ]
  done
done
