#!/usr/bin/env bash
# Measures two builds of ledgerfs side by side: A/B of a change, medians of
# RUNS runs (3), the builds interleaved so that drift of the machine falls on
# both. Each run mounts a fresh repository (collections off, as compare.sh
# does) and runs the workloads compare.sh runs on ledgerfs that a change of
# the engine moves: ledgerfs bench (a big file written and read, 128 KiB
# and 4 KiB files created, stat'ed, deleted), 4 KiB pwrite+fdatasync in a
# 4 MiB and a SIZE_MIB file, safe saves (a temporary fsynced, renamed over,
# its directory fsynced), SQLite transactions, cp -a, tar c and rm -rf of
# GOROOT/src.
#
#   bench/ab.sh OLD_REV NEW_REV [WORKDIR]     (as root, to drop caches)
#
# Prints a table: each figure's median for A and B and B/A. SIZE_MIB (1024),
# SYNC_OPS (3000), SAVE_OPS (1000), SQL_OPS (300), SQL_SECS (3: transactions
# go on until then, as in compare.sh), SQL_MIB (100) and RUNS (3) scale it;
# ONLY=group,group runs only those groups: bench, fsync, save, sqlite, tree.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/ab.sh OLD_REV NEW_REV [WORKDIR]" >&2; exit 2; }
a_rev=$1 b_rev=$2
SIZE_MIB=${SIZE_MIB:-1024} SYNC_OPS=${SYNC_OPS:-3000} SAVE_OPS=${SAVE_OPS:-1000} SQL_OPS=${SQL_OPS:-300} SQL_SECS=${SQL_SECS:-3} SQL_MIB=${SQL_MIB:-100} RUNS=${RUNS:-3}
GOSRC=$(go env GOROOT)/src
# The work directory is kept: its figures and logs are the run's record.
. bench/scratch.sh ab "${3:-$(mktemp -d /tmp/ledgerfs-ab.XXXXXX)}"

build() { # rev name
  local src="$work/src-$2"
  rm -rf "$src"
  git worktree add -f --detach "$src" "$1" >/dev/null
  (cd "$src" && go build -o "$work/ledgerfs-$2" ./cmd/ledgerfs)
  git worktree remove -f "$src"
}
build "$a_rev" A
build "$b_rev" B

drop_caches() { sync; if [ "$(id -u)" = 0 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
now() { date +%s.%N; }
field() { python3 -c 'import json,sys,re
r = json.load(open(sys.argv[1]))
if isinstance(r, dict) and "results" in r:
    print(next(x[sys.argv[3]] for x in r["results"] if re.search(sys.argv[2], x["phase"])))
else:
    print(r[sys.argv[2]])' "$@"; }
out="$work/figures.tsv"
: >"$out"
put() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$out"; } # build run name value
want() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }

for run in $(seq "$RUNS"); do
  for b in A B; do
    rm -rf "$work/repo"; mkdir -p "$mnt"
    "$work/ledgerfs-$b" mount --collect-after 0 --collect-every 0 "$work/repo" "$mnt" >"$work/ledgerfs-$b-$run.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
    mountpoint -q "$mnt" || { echo "mount of build $b failed"; cat "$work/ledgerfs-$b-$run.log"; exit 1; }
    d="$mnt/bench/page"; mkdir -p "$d"
    echo "run $run, build $b" >&2

    if want bench; then
    "$work/ledgerfs-$b" bench --json --big-file-size "${SIZE_MIB}M" "$d" >"$work/bench.json" 2>/dev/null
    put $b $run "bench: write ${SIZE_MIB} MiB, MB/s" "$(field "$work/bench.json" '^write' mb_per_s)"
    put $b $run "bench: read ${SIZE_MIB} MiB, MB/s" "$(field "$work/bench.json" '^read .* file, ' mb_per_s)"
    put $b $run "bench: 128 KiB creates/s" "$(field "$work/bench.json" '^create .*128 KiB' ops_per_s)"
    put $b $run "bench: 4 KiB creates/s" "$(field "$work/bench.json" '^create .*4 KiB' ops_per_s)"
    put $b $run "bench: 4 KiB stats/s" "$(field "$work/bench.json" '^stat .*4 KiB' ops_per_s)"
    put $b $run "bench: 4 KiB deletes/s" "$(field "$work/bench.json" '^delete .*4 KiB' ops_per_s)"
    fi
    for mib in 4 "$SIZE_MIB"; do
      want fsync || break
      python3 bench/syncwrite.py pwrite "$d/sync$mib" "$mib" "$SYNC_OPS" >"$work/sync.json"
      put $b $run "4 KiB pwrite+fdatasync, $mib MiB file: p50 ms" "$(field "$work/sync.json" p50_ms)"
      put $b $run "4 KiB pwrite+fdatasync, $mib MiB file: p99 ms" "$(field "$work/sync.json" p99_ms)"
      put $b $run "4 KiB pwrite+fdatasync, $mib MiB file: max ms" "$(field "$work/sync.json" max_ms)"
      put $b $run "4 KiB pwrite+fdatasync, $mib MiB file: calls/s" "$(field "$work/sync.json" ops_per_s)"
      rm -f "$d/sync$mib"
    done
    if want save; then
      mkdir -p "$d/save"
      python3 bench/syncwrite.py save "$d/save" "$SAVE_OPS" >"$work/save.json"
      put $b $run "safe save, 4 KiB: p50 ms" "$(field "$work/save.json" p50_ms)"
      put $b $run "safe save, 4 KiB: p99 ms" "$(field "$work/save.json" p99_ms)"
      put $b $run "safe save, 4 KiB: saves/s" "$(field "$work/save.json" ops_per_s)"
      rm -rf "$d/save"
    fi
    for mode in delete wal; do
      want sqlite || break
      python3 bench/syncwrite.py sqlite "$d/sql-$mode.db" "$mode" "$SQL_MIB" "$SQL_OPS" "$SQL_SECS" >"$work/sql.json"
      put $b $run "SQLite $SQL_MIB MiB, $mode, tx/s" "$(field "$work/sql.json" ops_per_s)"
      put $b $run "SQLite $SQL_MIB MiB, $mode, p99 ms" "$(field "$work/sql.json" p99_ms)"
      put $b $run "SQLite $SQL_MIB MiB, $mode, max ms" "$(field "$work/sql.json" max_ms)"
      rm -f "$d/sql-$mode.db"*
    done
    if want tree; then
    drop_caches
    s=$(now); cp -a "$GOSRC" "$d/gosrc"; e=$(now)
    put $b $run "cp -a GOROOT/src, s" "$(echo "$e-$s" | bc -l)"
    drop_caches
    s=$(now); (cd "$d" && tar cf - gosrc | cat >/dev/null); e=$(now)
    put $b $run "tar c of it, s" "$(echo "$e-$s" | bc -l)"
    s=$(now); rm -rf "$d/gosrc"; e=$(now)
    put $b $run "rm -rf of it, s" "$(echo "$e-$s" | bc -l)"
    fi

    umount "$mnt"; wait "$pid"; pid=
  done
done

python3 - "$out" "$a_rev" "$b_rev" <<'PY'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    b, run, name, v = line.rstrip("\n").split("\t")
    if name not in rows:
        rows[name] = {"A": [], "B": []}
        order.append(name)
    rows[name][b].append(float(v))
print(f"{'figure':48} {'A: ' + sys.argv[2][:10]:>14} {'B: ' + sys.argv[3][:10]:>14} {'B/A':>6}   runs")
for name in order:
    a, b = statistics.median(rows[name]["A"]), statistics.median(rows[name]["B"])
    runs = " ".join(f"{x:.3g}" for x in rows[name]["A"]) + " | " + " ".join(f"{x:.3g}" for x in rows[name]["B"])
    print(f"{name:48} {a:14.3f} {b:14.3f} {b / a if a else float('nan'):6.2f}   {runs}")
PY
