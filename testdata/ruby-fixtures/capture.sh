#!/usr/bin/env bash
# capture.sh: capture wire fixtures from real Ruby Sidekiq 6.4.1.
#
# What it does: starts its OWN redis-server on a free 127.0.0.1 port (never the
# shared 127.0.0.1:6379) with no persistence, runs capture.rb against it (which
# pushes jobs as a Ruby client, runs the real Sidekiq CLI with jobs.rb, and
# watches Redis with MONITOR), and writes every captured Redis value byte-exact
# into testdata/ruby-fixtures/6.4.1/ together with manifest.json. The old
# 6.4.1/ directory is replaced, so running it again is safe (idempotent);
# jids, timestamps, scores and the process identity differ per run.
#
# Needs (Debian 12 packages): ruby (3.1), ruby-sidekiq (6.4.1), ruby-activejob
# (6.1), redis-server, redis-tools.
#   apt-get install -y ruby ruby-sidekiq ruby-activejob redis-server redis-tools
#
# Run from anywhere:   bash testdata/ruby-fixtures/capture.sh
# Takes about 30 s. The 7.3.10/ and 8.1.7/ fixtures are cut from captures of
# real Ruby Sidekiq by captured_7_3_10.rb and captured_8_1_7.rb, not by this
# script.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/6.4.1"

for bin in ruby redis-server redis-cli; do
  command -v "$bin" >/dev/null || { echo "capture.sh: $bin is not installed" >&2; exit 1; }
done
ruby -e 'require "sidekiq"; exit(Sidekiq::VERSION == "6.4.1" ? 0 : 1)' ||
  { echo "capture.sh: Ruby Sidekiq 6.4.1 is required (apt-get install ruby-sidekiq)" >&2; exit 1; }
SIDEKIQ_BIN="${SIDEKIQ_BIN:-$(command -v sidekiq || dpkg -L ruby-sidekiq | grep '/bin/sidekiq$' | head -n1)}"
[ -x "$SIDEKIQ_BIN" ] || { echo "capture.sh: sidekiq CLI not found" >&2; exit 1; }

WORK="$(mktemp -d /tmp/gojob-capture.XXXXXX)"
REDIS_PID=""
cleanup() {
  if [ -n "$REDIS_PID" ]; then
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT="$(ruby -rsocket -e 's = TCPServer.new("127.0.0.1", 0); puts s.addr[1]; s.close')"
if [ "$PORT" = 6379 ]; then echo "capture.sh: refusing port 6379" >&2; exit 1; fi
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
  --logfile "$WORK/redis.log" --daemonize no &
REDIS_PID=$!
for _ in $(seq 1 100); do
  redis-cli -p "$PORT" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$PORT" ping >/dev/null

rm -rf "$OUT"
mkdir -p "$OUT"
if ! REDIS_URL="redis://127.0.0.1:$PORT/0" REDIS_PORT="$PORT" OUT_DIR="$OUT" WORK_DIR="$WORK" \
  SIDEKIQ_BIN="$SIDEKIQ_BIN" ruby "$HERE/capture.rb"; then
  echo "capture.sh: capture failed; Sidekiq log:" >&2
  tail -n 50 "$WORK/sidekiq.log" >&2 || true
  exit 1
fi
echo "capture.sh: fixtures in $OUT"
