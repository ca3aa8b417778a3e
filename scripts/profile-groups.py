"""Groups the samples of a Go CPU profile (go tool pprof -traces output on
stdin) by the part of gojob that ran them, as a Markdown table: each sample
goes to the first frame, from the leaf up, that belongs to a part of gojob
or to a client library, so a part's share includes the allocations and
system calls it makes. Used by scripts/benchmarks.sh."""

import re
import sys

groups = [
    ("PostgreSQL client (pgx)", ("github.com/jackc/",)),
    ("Redis client (redigo)", ("github.com/gomodule/redigo",)),
    ("durable extension (groups, locks, rows)", ("github.com/gojob/gojob/durable",)),
    ("fetch (rounds, mirrors, acknowledgements)", ("github.com/gojob/gojob/sidekiq/internal/fetch", "github.com/gojob/gojob/sidekiq/internal/redisx")),
    ("payload parsing (rubyjson, wire)", ("github.com/gojob/gojob/sidekiq/rubyjson", "github.com/gojob/gojob/sidekiq/wire", "github.com/gojob/gojob/sidekiq/internal/lazyjson")),
    ("processor, middleware, metrics", ("github.com/gojob/gojob",)),
]
totals, total = {}, 0.0
def flush(v, frames):
    global total
    if v is None:
        return
    total += v
    for f in frames:
        for title, prefixes in groups:
            if f.startswith(prefixes):
                totals[title] = totals.get(title, 0) + v
                return
    if any("netpoll" in f or "findRunnable" in f or "schedule" in f for f in frames):
        key = "Go scheduler (waking goroutines, polling the network)"
    elif any(f.startswith("runtime.gc") or "bgsweep" in f or "bgscavenge" in f for f in frames):
        key = "Go garbage collector"
    else:
        key = "other"
    totals[key] = totals.get(key, 0) + v
v, frames = None, []
for line in sys.stdin:
    if line.startswith("-----------"):
        flush(v, frames)
        v, frames = None, []
        continue
    m = re.match(r"\s*([\d.]+)(ms|s)\s+(\S+)", line)
    if m and v is None and frames == [] and re.match(r"\s*[\d.]+(ms|s)\s", line):
        v = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
        frames.append(m.group(3))
    elif v is not None and line.strip():
        frames.append(line.split()[0])
flush(v, frames)
order = [g[0] for g in groups] + ["Go scheduler (waking goroutines, polling the network)", "Go garbage collector", "other"]
print("| what | share of gojob's CPU |")
print("|---|---|")
for title in order:
    if totals.get(title):
        print("| %s | %.0f%% |" % (title, 100 * totals[title] / total))
