#!/usr/bin/env bash
# Runs the tests beside CPU-bound load: PER_CORE (default 2) busy loops per
# core, started before the tests and stopped when they end, however they
# end. A test that waits for an event rather than a deadline passes here as
# it does on a quiet machine, only slower.
#
#   scripts/test-stress.sh                         # the whole suite, as make test runs it
#   scripts/test-stress.sh -count=3 -run 'TestX' ./cli/   # some tests, several times
#   PER_CORE=4 scripts/test-stress.sh ./sidekiq/...       # a heavier load
#
# Arguments go to go test after -race -count=1 -timeout 90m (later ones
# win); without a package argument it runs ./... .
set -euo pipefail
cd "$(dirname "$0")/.."

per_core=${PER_CORE:-2}
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)
pids=()
stop() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT INT TERM

for _ in $(seq $((cores * per_core))); do
  # A shell loop, not yes(1): nothing to write to, nothing to install.
  sh -c 'while :; do :; done' &
  pids+=($!)
done
echo "test-stress: ${#pids[@]} busy loops on $cores cores beside the tests" >&2

args=("$@")
has_pkg=false
for a in "${args[@]}"; do
  case $a in ./* | github.com/*) has_pkg=true ;; esac
done
$has_pkg || args+=(./...)
start=$(date +%s)
status=0
go test -race -count=1 -timeout 90m "${args[@]}" || status=$?
echo "test-stress: go test exited $status after $(( $(date +%s) - start )) s under load" >&2
exit $status
