#!/usr/bin/env bash
# rm -rf of one large directory on a fresh ledgerfs mount: the time, the
# server's CPU-seconds, and what the server was asked (LOOKUP, GETATTR,
# READDIRPLUS, UNLINK) and how often it decoded a tree node again, for
# settings of one build alternated, RUNS (3) runs each.
#
#   bench/rmrf.sh [FLAGS ...]    each argument one setting, e.g.
#   bench/rmrf.sh "--cache-timeout 1" "--cache-timeout 60"
#
# FILES (100000) empty files are created with touch and the page synced
# before the timed rm -rf. Collections are off, as in compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=("")
FILES=${FILES:-100000} RUNS=${RUNS:-3}
. bench/scratch.sh rmrf
go build -o "$work/ledgerfs" ./cmd/ledgerfs

cpu() { awk '{print $14+$15}' "/proc/$1/stat"; } # clock ticks
counts() { # requests by op, then node-cache misses, from .stats
  awk '/^ledgerfs_fuse_op_duration_seconds_count\{op="(lookup|getattr|readdirplus|unlink)"/ {split($1, a, "\""); c[a[2]] = $2}
       /^ledgerfs_cache_lookups_total\{cache="node",result="miss"\}/ {m = $2}
       END {printf "%d %d %d %d %d\n", c["lookup"], c["getattr"], c["readdirplus"], c["unlink"], m}' "$mnt/.stats"
}
for run in $(seq "$RUNS"); do
  for s in "${settings[@]}"; do
    rm -rf "$work/repo" && mkdir -p "$work/repo" "$mnt"
    # shellcheck disable=SC2086 # a setting is several flags
    "$work/ledgerfs" mount --collect-after 0 --collect-every 0 --prune-below 0 $s "$work/repo" "$mnt" >"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
    mountpoint -q "$mnt" || { cat "$work/server.log" >&2; exit 1; }
    d="$mnt/bench/page/dir"
    mkdir -p "$d"
    (cd "$d" && seq 1 "$FILES" | xargs touch)
    sync -f "$d"
    read -r l0 g0 r0 u0 m0 < <(counts)
    c0=$(cpu "$pid") t0=$(date +%s.%N)
    rm -rf "$d"
    t1=$(date +%s.%N) c1=$(cpu "$pid")
    read -r l1 g1 r1 u1 m1 < <(counts)
    printf 'run %d, %-24s rm -rf of %d: %6.2f s, server %6.2f CPU-s; LOOKUP %d, GETATTR %d, READDIRPLUS %d, UNLINK %d; nodes decoded again %d\n' \
      "$run" "${s:-defaults}" "$FILES" "$(echo "$t1 - $t0" | bc)" "$(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l)" \
      $((l1 - l0)) $((g1 - g0)) $((r1 - r0)) $((u1 - u0)) $((m1 - m0))
    umount "$mnt" && wait "$pid" || true
    pid=
  done
done
