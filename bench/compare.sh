#!/usr/bin/env bash
# Measures the same workloads, in one run, on a native directory, on go-fuse's
# example/loopback over a native directory, on go-fuse's loopback without
# passthrough (as root), on JuiceFS (if built) and on a fresh ledgerfs page,
# then prints every figure with ledgerfs's ratio to each of the others, and
# the performance targets of BENCHMARKS.md as met or not (bench/report.py).
#
#   bench/compare.sh [WORKDIR]          (as root, so that caches can be dropped)
#   RUNS=3 bench/compare.sh [WORKDIR]   three full runs, then their medians
#
# Run as root, example/loopback hands its open files to the kernel (FUSE
# passthrough, Linux >= 6.9): reads and writes of file data never reach it.
# As root the script therefore also measures the same loopback with
# CAP_SYS_ADMIN dropped ("lb-nopt"), where every read and write is a request
# to the server, as on ledgerfs; targets are judged against it.
#
# With a juicefs binary on PATH (or named by JUICEFS), JuiceFS is a column too:
# a fresh volume with Badger metadata and local file storage under WORKDIR,
# mounted with its defaults (its local cache directory in WORKDIR too). It is a
# peer measurement, built from its source (see BENCHMARKS.md), not a dependency.
#
# SIZE_MIB (1024), BIG_MIB (4096), SMALL_FILES (10000), LS_FILES (100000),
# PAGES (1000), SYNC_OPS (3000 timed 4 KiB pwrite+fdatasync: ledgerfs commits
# a file's fsynced changes every ~240 fsyncs, and a p99 of 300 calls hides
# that commit's stall), SQL_OPS (300 SQLite transactions, and more until
# SQL_SECS, 3, have passed: 300 take 0.15 s at 2,000 tx/s, and whether one
# of Badger's compactions lands in so short a window decided the figure) and
# SQL_MIB (100: the SQLite database) scale the workloads;
# QUICK=1 shrinks all of them for a smoke run; APPS=0 leaves out the
# applications (git, go build, tar xzf, rsync). ONLY=group,group runs only
# those groups of workloads, side by side as in a full run: seq (dd and the
# storage rows), bench (ledgerfs bench), fio, fsync, save (SAVE_OPS, 1,000,
# safe saves: 4 KiB to a temporary, fsynced, renamed over the final name,
# the directory fsynced), sqlite, creates, ls, tree (cp -a, tar c, rm -rf),
# rename, stress (stress-ng), apps, sparse (truncate -s BIG_MIB, a write in
# the middle), rss. FS=ledgerfs,lb-nopt
# measures only those filesystems. Needs bc, python3, fio,
# stress-ng, git and rsync.
#
# ledgerfs is mounted with LEDGERFS_FLAGS, by default with collections off
# (--collect-after 0 --collect-every 0 --prune-below 0): a collection that
# starts between two workloads would run during the next one.
# bench/space.sh measures them. Pruning for space is such a collection: with
# the other stores of a full run on the disk less than --prune-below's 10 %
# was free, and ledgerfs pruned and reclaimed its page every few GiB
# written, in the middle of whichever workload ran then.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-bench.XXXXXX)}
# RUNS=N: N full runs one after another, each with fresh mounts in
# WORKDIR/runI, then the medians of their figures and ratios.
if [ "${RUNS:-1}" -gt 1 ] && [ -z "${COMPARE_RUN:-}" ]; then
  mkdir -p "$work"
  for i in $(seq "$RUNS"); do
    COMPARE_RUN=$i "$0" "$work/run$i" >"$work/run$i.log" 2>&1 || { echo "run $i failed: $work/run$i.log" >&2; exit 1; }
    echo "run $i of $RUNS done" >&2
  done
  python3 bench/report.py "$work"/run*/figures.tsv | tee "$work/medians.txt"
  exit 0
fi
if [ "${QUICK:-}" = 1 ]; then
  : "${SIZE_MIB:=64}" "${BIG_MIB:=256}" "${SMALL_FILES:=500}" "${LS_FILES:=2000}" "${PAGES:=50}" "${SYNC_OPS:=300}" "${SQL_OPS:=100}" "${SAVE_OPS:=200}" "${SQL_MIB:=16}" "${SQL_SECS:=0}"
fi
SIZE_MIB=${SIZE_MIB:-1024}
BIG_MIB=${BIG_MIB:-4096}
SMALL_FILES=${SMALL_FILES:-10000}
LS_FILES=${LS_FILES:-100000}
PAGES=${PAGES:-1000}
SYNC_OPS=${SYNC_OPS:-3000}
SQL_OPS=${SQL_OPS:-300}
SAVE_OPS=${SAVE_OPS:-1000}
SQL_SECS=${SQL_SECS:-3}
SQL_MIB=${SQL_MIB:-100}
LEDGERFS_FLAGS=${LEDGERFS_FLAGS---collect-after 0 --collect-every 0 --prune-below 0}
GOSRC=$(go env GOROOT)/src

# go-fuse's loopback mounts through fusermount (fuse3's fusermount3 or
# fuse's fusermount); without it the loopback column fails at its mount.
if ! command -v fusermount3 >/dev/null && ! command -v fusermount >/dev/null; then
  echo "compare.sh needs fusermount3 for go-fuse's loopback: apt-get install fuse3" >&2
  exit 1
fi
JUICEFS=${JUICEFS:-$(command -v juicefs || true)}
# A full run with JuiceFS used ~46 GiB of the work directory's filesystem at
# its peak (JuiceFS keeps deleted files in its trash for a day); a run that
# fills the disk fails halfway with ENOSPC. NEED_GIB overrides the check.
if [ "${QUICK:-}" = 1 ]; then need_gib=${NEED_GIB:-8}
elif [ -n "$JUICEFS" ]; then need_gib=${NEED_GIB:-64}
else need_gib=${NEED_GIB:-24}; fi
mkdir -p "$work"
free_gib=$(( $(df -Pk "$work" | awk 'NR==2 {print $4}') / 1048576 ))
if [ "$free_gib" -lt "$need_gib" ]; then
  echo "compare.sh needs ~${need_gib} GiB free under $work, has ${free_gib} GiB (NEED_GIB overrides)" >&2
  exit 1
fi
go build -o "$work/ledgerfs" ./cmd/ledgerfs
go build -o "$work/loopback" github.com/hanwen/go-fuse/v2/example/loopback

pids=()
cleanup() {
  for m in "$work/lb" "$work/lbnp" "$work/jfs" "$work/lf"; do
    umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # The stores are tens of GiB; the figures (*.json, logs) stay. KEEP=1
  # keeps everything.
  if [ "${KEEP:-}" != 1 ]; then
    rm -rf "$work/jfs-data" "$work/jfs-cache" "$work/repo" "$work/lb-under" "$work/lbnp-under" \
      "$work/native" "$work/src.bin" "$work/gitsrc" "$work/modsrc" "$work/src.tgz" 2>/dev/null || true
  fi
}
trap cleanup EXIT

mkdir -p "$work/native" "$work/lb-under" "$work/lb" "$work/lf"
"$work/loopback" "$work/lb" "$work/lb-under" >"$work/loopback.log" 2>&1 &
lbpid=$!; pids+=($lbpid)
mounts=(lb lf)
order=(native loopback ledgerfs)
declare -A dir=([native]="$work/native" [loopback]="$work/lb" [ledgerfs]="$work/lf/bench/page")
declare -A store=([native]="$work/native" [loopback]="$work/lb-under" [ledgerfs]="$work/repo")
if [ "$(id -u)" = 0 ]; then
  # Loopback without passthrough: the mount is made here, and loopback serves
  # the /dev/fuse descriptor it inherits (go-fuse's /dev/fd/N mountpoint)
  # without CAP_SYS_ADMIN, so registering a backing file fails and go-fuse
  # serves every read and write itself.
  mkdir -p "$work/lbnp-under" "$work/lbnp"
  (
    exec 3<>/dev/fuse
    mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0,max_read=131072 loopback "$work/lbnp"
    exec setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin "$work/loopback" /dev/fd/3 "$work/lbnp-under"
  ) >"$work/loopback-nopt.log" 2>&1 &
  lbnppid=$!; pids+=($lbnppid)
  mounts+=(lbnp)
  order=(native loopback lb-nopt ledgerfs)
  dir[lb-nopt]="$work/lbnp"
  store[lb-nopt]="$work/lbnp-under"
fi
if [ -n "$JUICEFS" ]; then
  mkdir -p "$work/jfs-data/bucket" "$work/jfs" "$work/jfs-cache"
  "$JUICEFS" format --storage file --bucket "$work/jfs-data/bucket/" "badger://$work/jfs-data/meta" bench >"$work/juicefs-format.log" 2>&1
  "$JUICEFS" mount --cache-dir "$work/jfs-cache" "badger://$work/jfs-data/meta" "$work/jfs" >"$work/juicefs.log" 2>&1 &
  jfspid=$!; pids+=($jfspid)
  mounts+=(jfs)
  order=("${order[@]:0:${#order[@]}-1}" juicefs ledgerfs)
  dir[juicefs]="$work/jfs"
  store[juicefs]="$work/jfs-data"
fi
"$work/ledgerfs" mount $LEDGERFS_FLAGS "$work/repo" "$work/lf" >"$work/ledgerfs.log" 2>&1 &
lfpid=$!; pids+=($lfpid)
for m in "${mounts[@]}"; do
  for _ in $(seq 100); do mountpoint -q "$work/$m" && break; sleep 0.1; done
  mountpoint -q "$work/$m" || { echo "mount $m failed"; cat "$work"/*.log; exit 1; }
done
mkdir -p "$work/lf/bench/page"
# FS=name,name measures only those of the filesystems (a profile of one of
# them in the state a full run leaves it); the figures then lack the others.
if [ -n "${FS:-}" ]; then
  kept=()
  for t in "${order[@]}"; do [[ ",$FS," != *",$t,"* ]] || kept+=("$t"); done
  order=("${kept[@]}")
fi
declare -A pid=([loopback]=$lbpid [ledgerfs]=$lfpid)
[ -z "${lbnppid:-}" ] || pid[lb-nopt]=$lbnppid
# JuiceFS's mount process supervises a child that serves the mount: its
# CPU and memory are the child's.
if [ -n "${jfspid:-}" ]; then
  jfsserver=$(pgrep -P "$jfspid" | head -1 || true)
  pid[juicefs]=${jfsserver:-$jfspid}
fi

# want GROUP: whether ONLY leaves the group of workloads in.
want() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }
drop_caches() { sync; if [ "$(id -u)" = 0 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
now() { date +%s.%N; }
hwm() { awk '/VmHWM/{print int($2/1024)}' "/proc/$1/status"; }
reset_hwm() { echo 5 >"/proc/$1/clear_refs" 2>/dev/null || true; }
# sample_anon PID FILE: the largest anonymous RSS (RssAnon: heap and
# allocations, not mapped files, which are page cache) of PID in MiB,
# sampled every 100 ms into FILE until the sampler is killed. The memory
# bound is on it; VmHWM counts the mapped pages too.
sample_anon() {
  local peak=0 v
  echo 0 >"$2"
  while v=$(awk '/^RssAnon/{print int($2/1024)}' "/proc/$1/status" 2>/dev/null) && [ -n "$v" ]; do
    if [ "$v" -gt "$peak" ]; then peak=$v; echo "$peak" >"$2"; fi
    sleep 0.1
  done
}
# used DIR: bytes on disk under DIR, sparse files counted as stored, once
# two readings a second apart agree (at most 30 s): a store's background
# work (ledgerfs's table compactions, JuiceFS's uploads) otherwise lands in
# the storage rows' differences, and a compaction that merged tables made a
# 1-byte edit read as -4 MiB.
used() {
  local a b i
  sync; b=$(du -s -B1 "$1" | cut -f1)
  for i in $(seq 30); do
    a=$b; sleep 1; sync; b=$(du -s -B1 "$1" | cut -f1)
    [ "$a" != "$b" ] || break
  done
  echo "$b"
}

# cpu_s PID: the CPU-seconds, user and system, PID has used so far.
tck=$(getconf CLK_TCK)
cpu_s() { awk -v t="$tck" '{print ($14+$15)/t}' "/proc/$1/stat" 2>/dev/null || echo 0; }
declare -A res cpu cpu_last
rows=()
measure() { # name unit target value
  res["$1|$3"]=$4
  local r="$1|$2" c
  [[ " ${rows[*]} " == *" $r "* ]] || rows+=("$r")
  # With each figure, the server's CPU-seconds since the system's previous
  # figure: the workload's and its setup's, the figure that holds on a
  # shared machine (none for native, served by the kernel).
  if [ -n "${pid[$3]:-}" ]; then
    c=$(cpu_s "${pid[$3]}")
    cpu["$1|$3"]=$(echo "$c - ${cpu_last[$3]:-$c}" | bc -l)
    cpu_last[$3]=$c
  fi
}
# jq-free extraction from ledgerfs bench --json: field of the phase matching a pattern.
benchfield() { python3 -c 'import json,sys,re; r=json.load(open(sys.argv[1]))["results"]; print(next(x[sys.argv[3]] for x in r if re.search(sys.argv[2], x["phase"])))' "$@"; }

# The chunker+hash ceiling, measured now on this machine: restic's chunker
# and SHA-256 of every chunk in one stream (cas.BenchmarkChunkAndHash).
# ledgerfs's own writer chunks on every core (cas.BenchmarkWriter).
benchmb() { go test -run '^$' -bench "^$1\$" -benchtime 3x ./cas | awk '/MB\/s/{for(i=1;i<=NF;i++) if($i=="MB/s") print $(i-1)}'; }
ceiling=$(benchmb BenchmarkChunkAndHash)
writer=$(benchmb BenchmarkWriter)
echo "chunker+hash (cas.BenchmarkChunkAndHash): $ceiling MB/s; cas.BenchmarkWriter: $writer MB/s" >&2

# Source data, generated once on the native disk (random: nothing dedups).
head -c "$((SIZE_MIB << 20))" /dev/urandom >"$work/src.bin"

# The applications' inputs, made once on the native disk: a git repository
# of GOROOT/src (a local clone's source), a tarball of it, and this module's
# source (go build, with the build cache warm outside the mounts). npm ci is
# not among them: npm 11 fetches package metadata from the registry even
# with every tarball in its cache (--offline fails with ENOTCACHED), so it
# would time the network.
if [ "${APPS:-1}" = 1 ] && want apps; then
  rm -rf "$work/gitsrc" "$work/modsrc"
  cp -a "$GOSRC" "$work/gitsrc"
  git -C "$work/gitsrc" init -q && git -C "$work/gitsrc" add -A &&
    git -C "$work/gitsrc" -c user.name=bench -c user.email=bench@localhost commit -qm src
  tar czf "$work/src.tgz" -C "$(dirname "$GOSRC")" src
  mkdir -p "$work/modsrc" && git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t "$work/modsrc"
  GOFLAGS=-buildvcs=false go build -C "$work/modsrc" -o /dev/null ./cmd/ledgerfs # warms the build cache
fi

for t in "${order[@]}"; do
  d=${dir[$t]}
  echo "== $t: $d" >&2
  [ -z "${pid[$t]:-}" ] || cpu_last[$t]=$(cpu_s "${pid[$t]}")
  if want seq; then
  drop_caches
  s=$(now); dd if="$work/src.bin" of="$d/big" bs=1M conv=fsync status=none; e=$(now)
  measure "seq write ${SIZE_MIB} MiB (dd, fsync)" MB/s "$t" "$(echo "$SIZE_MIB*1.048576/($e-$s)" | bc -l)"
  drop_caches
  s=$(now); dd if="$d/big" of=/dev/null bs=1M status=none; e=$(now)
  measure "cold seq read ${SIZE_MIB} MiB (dd)" MB/s "$t" "$(echo "$SIZE_MIB*1.048576/($e-$s)" | bc -l)"

  # Storage: a second copy of the file, then a 1-byte edit in its middle.
  u0=$(used "${store[$t]}")
  cp "$d/big" "$d/big2"
  u1=$(used "${store[$t]}")
  printf 'x' | dd of="$d/big2" bs=1 seek=$((SIZE_MIB << 19)) conv=notrunc,fsync status=none
  u2=$(used "${store[$t]}")
  measure "storage added by a 2nd copy of ${SIZE_MIB} MiB" "% of size" "$t" "$(echo "100*($u1-$u0)/($SIZE_MIB*1048576)" | bc -l)"
  measure "storage added by a 1-byte edit" KiB "$t" "$(echo "($u2-$u1)/1024" | bc -l)"
  rm -f "$d/big" "$d/big2"
  fi

  if want bench; then
  "$work/ledgerfs" bench --json --big-file-size "${SIZE_MIB}M" "$d" >"$work/bench-$t.json" 2>/dev/null
  measure "ledgerfs bench: write ${SIZE_MIB} MiB" MB/s "$t" "$(benchfield "$work/bench-$t.json" '^write' mb_per_s)"
  measure "ledgerfs bench: read ${SIZE_MIB} MiB" MB/s "$t" "$(benchfield "$work/bench-$t.json" '^read .* file, ' mb_per_s)"
  measure "ledgerfs bench: 128 KiB creates" files/s "$t" "$(benchfield "$work/bench-$t.json" '^create .*128 KiB' ops_per_s)"
  measure "ledgerfs bench: 4 KiB creates" files/s "$t" "$(benchfield "$work/bench-$t.json" '^create .*4 KiB' ops_per_s)"
  measure "ledgerfs bench: 4 KiB stats" ops/s "$t" "$(benchfield "$work/bench-$t.json" '^stat .*4 KiB' ops_per_s)"
  measure "ledgerfs bench: 4 KiB deletes" ops/s "$t" "$(benchfield "$work/bench-$t.json" '^delete .*4 KiB' ops_per_s)"
  fi

  if command -v fio >/dev/null && want fio; then
    fiorun() { # name rw bs size mb|iops extra...
      local name=$1 rw=$2 bs=$3 size=$4 mode=$5; shift 5
      drop_caches
      fio --name="$name" --directory="$d" --rw="$rw" --bs="$bs" --size="$size" --numjobs=1 \
          --ioengine=psync --output-format=json "$@" >"$work/fio-$t-$name.json"
      python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; s=j[sys.argv[2]]; print(s["bw_bytes"]/1e6 if sys.argv[3]=="mb" else s["iops"])' \
          "$work/fio-$t-$name.json" "$( [[ $rw == *write* ]] && echo write || echo read)" "$mode"
    }
    measure "fio seq write 1M, end_fsync" MB/s "$t" "$(fiorun seqw write 1M "${SIZE_MIB}M" mb --end_fsync=1)"
    measure "fio seq read 1M, cold" MB/s "$t" "$(fiorun seqw read 1M "${SIZE_MIB}M" mb)"
    measure "fio rand read 4k (20 s max)" IOPS "$t" "$(fiorun seqw randread 4k "${SIZE_MIB}M" iops --runtime=20 --time_based=0)"
    measure "fio rand write 4k, fsync at end (20 s max)" IOPS "$t" "$(fiorun seqw randwrite 4k "${SIZE_MIB}M" iops --runtime=20 --end_fsync=1)"
    rm -f "$d"/seqw*
  fi

  # Small synchronous writes: a commit each on ledgerfs. On ledgerfs the
  # bytes its edits chunked per commit, and the syncs of its sync log and of
  # its db, are read from the mount's .stats.
  edited() { awk '/^ledgerfs_value_edit_bytes_total/{b+=$2} /^ledgerfs_value_edits_total/{n=$2} /^ledgerfs_syncs_total\{what="log"\}/{l=$2} /^ledgerfs_syncs_total\{what="db"\}/{d=$2} END{printf "%d %d %d %d\n", b, n, l, d}' "$work/lf/.stats"; }
  syncfield() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
  for mib in 4 "$SIZE_MIB"; do
    want fsync || break
    [ "$t" = ledgerfs ] && read -r b0 n0 l0 d0 < <(edited)
    python3 bench/syncwrite.py pwrite "$d/sync$mib" "$mib" "$SYNC_OPS" >"$work/sync-$t-$mib.json"
    if [ "$t" = ledgerfs ]; then
      read -r b1 n1 l1 d1 < <(edited)
      echo "$(( (b1 - b0) / (n1 > n0 ? n1 - n0 : 1) )) bytes chunked per commit in $((n1 - n0)) edits; $((l1 - l0)) syncs of the sync log, $((d1 - d0)) of the db" >"$work/sync-edit-$mib.txt"
    fi
    measure "4 KiB pwrite+fdatasync, ${mib} MiB file: p50" ms "$t" "$(syncfield "$work/sync-$t-$mib.json" p50_ms)"
    measure "4 KiB pwrite+fdatasync, ${mib} MiB file: p99" ms "$t" "$(syncfield "$work/sync-$t-$mib.json" p99_ms)"
    measure "4 KiB pwrite+fdatasync, ${mib} MiB file: max" ms "$t" "$(syncfield "$work/sync-$t-$mib.json" max_ms)"
    measure "4 KiB pwrite+fdatasync, ${mib} MiB file: calls" calls/s "$t" "$(syncfield "$work/sync-$t-$mib.json" ops_per_s)"
    rm -f "$d/sync$mib"
  done
  if want save; then
    mkdir -p "$d/save"
    python3 bench/syncwrite.py save "$d/save" "$SAVE_OPS" >"$work/save-$t.json"
    measure "safe save (4 KiB to a temporary, fsync, rename over, fsync the directory): p50" ms "$t" "$(syncfield "$work/save-$t.json" p50_ms)"
    measure "safe save (4 KiB to a temporary, fsync, rename over, fsync the directory): p99" ms "$t" "$(syncfield "$work/save-$t.json" p99_ms)"
    measure "safe save (4 KiB to a temporary, fsync, rename over, fsync the directory)" saves/s "$t" "$(syncfield "$work/save-$t.json" ops_per_s)"
    rm -rf "$d/save"
  fi
  for mode in delete wal; do
    want sqlite || break
    python3 bench/syncwrite.py sqlite "$d/sql-$mode.db" "$mode" "$SQL_MIB" "$SQL_OPS" "$SQL_SECS" >"$work/sql-$t-$mode.json"
    measure "SQLite ${SQL_MIB} MiB, 1-row transactions, $mode" tx/s "$t" "$(syncfield "$work/sql-$t-$mode.json" ops_per_s)"
    rm -f "$d/sql-$mode.db"*
  done

  if want creates; then
  mkdir -p "$d/small"
  drop_caches
  s=$(now)
  python3 - "$d/small" "$SMALL_FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
# Distinct content per file: on ledgerfs, files of one content would all
# deduplicate to the first one's chunk.
pool = memoryview(os.urandom(4096 * n))
for i in range(n):
    with open(os.path.join(d, "f%06d" % i), "wb") as f:
        f.write(pool[4096 * i:4096 * (i + 1)])
PY
  e=$(now)
  measure "${SMALL_FILES} x 4 KiB creates" files/s "$t" "$(echo "$SMALL_FILES/($e-$s)" | bc -l)"
  rm -rf "$d/small"
  fi

  if want ls; then
  mkdir -p "$d/many"
  python3 - "$d/many" "$LS_FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    open(os.path.join(d, "e%07d" % i), "wb").close()
PY
  drop_caches
  s=$(now); ls -l "$d/many" >/dev/null; e=$(now)
  measure "ls -l ${LS_FILES} entries" s "$t" "$(echo "$e-$s" | bc -l)"
  # Above 10,000 entries rm (fts) removes in inode order, not name order.
  s=$(now); rm -rf "$d/many"; e=$(now)
  measure "rm -rf of the ${LS_FILES} entries" s "$t" "$(echo "$e-$s" | bc -l)"
  fi

  if want tree; then
  drop_caches
  s=$(now); cp -a "$GOSRC" "$d/gosrc"; e=$(now)
  measure "cp -a GOROOT/src" s "$t" "$(echo "$e-$s" | bc -l)"
  drop_caches
  s=$(now); (cd "$d" && tar cf - gosrc | cat >/dev/null); e=$(now)
  measure "tar c of the copied GOROOT/src" s "$t" "$(echo "$e-$s" | bc -l)"
  drop_caches
  s=$(now); rm -rf "$d/gosrc"; e=$(now)
  measure "rm -rf of the copied GOROOT/src" s "$t" "$(echo "$e-$s" | bc -l)"
  fi

  # Write to a temporary name, then rename over the final one: rsync's,
  # editors' and package managers' pattern.
  if want rename; then
  mkdir -p "$d/tmpren"
  s=$(now)
  python3 - "$d/tmpren" "$((SMALL_FILES / 5))" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
pool = memoryview(os.urandom(4096 * n))
for i in range(n):
    tmp = os.path.join(d, ".f%06d.tmp" % i)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, pool[4096 * i:4096 * (i + 1)])
    os.close(fd)
    os.rename(tmp, os.path.join(d, "f%06d" % i))
PY
  e=$(now)
  measure "write 4 KiB to a temp name, rename over" files/s "$t" "$(echo "$((SMALL_FILES / 5))/($e-$s)" | bc -l)"
  rm -rf "$d/tmpren"
  fi

  # Metadata changes one at a time: stress-ng's bogo ops per second.
  if command -v stress-ng >/dev/null && want stress; then
    for st in chmod rename dir utime; do
      mkdir -p "$d/sng"
      v=$(stress-ng --"$st" 2 --timeout 5s --metrics-brief --temp-path "$d/sng" 2>&1 | awk -v s="$st" '$2 == "metrc:" && $4 == s {print $9; exit}')
      measure "stress-ng --$st 2" "ops/s" "$t" "${v:-0}"
      rm -rf "$d/sng"
    done
  fi

  if [ "${APPS:-1}" = 1 ] && want apps; then
    drop_caches
    s=$(now); git clone -q --no-hardlinks "$work/gitsrc" "$d/clone"; e=$(now)
    measure "git clone (local, GOROOT/src)" s "$t" "$(echo "$e-$s" | bc -l)"
    drop_caches
    s=$(now); git -C "$d/clone" status --porcelain >/dev/null; e=$(now)
    measure "git status in the clone, cold" s "$t" "$(echo "$e-$s" | bc -l)"
    rm -rf "$d/clone"
    cp -a "$work/modsrc" "$d/mod"
    drop_caches
    s=$(now); GOFLAGS=-buildvcs=false go build -C "$d/mod" -o "$d/mod/ledgerfs.bin" ./cmd/ledgerfs; e=$(now)
    measure "go build (source in it, cache warm)" s "$t" "$(echo "$e-$s" | bc -l)"
    rm -rf "$d/mod"
    mkdir -p "$d/untar"
    s=$(now); tar xzf "$work/src.tgz" -C "$d/untar"; e=$(now)
    measure "tar xzf of GOROOT/src" s "$t" "$(echo "$e-$s" | bc -l)"
    rm -rf "$d/untar"
    s=$(now); rsync -a "$GOSRC/" "$d/rsync/"; e=$(now)
    measure "rsync -a GOROOT/src in" s "$t" "$(echo "$e-$s" | bc -l)"
    rm -rf "$d/rsync"
  fi

  # A sparse file: grown by truncate (a VM image, a preallocated
  # download), then a 4 KiB write in its middle, fsynced.
  if want sparse; then
    s=$(now); truncate -s "${BIG_MIB}M" "$d/sparse"; e=$(now)
    measure "truncate -s ${BIG_MIB}M" s "$t" "$(echo "$e-$s" | bc -l)"
    s=$(now)
    python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY); os.pwrite(fd, os.urandom(4096), int(sys.argv[2]) << 19); os.fsync(fd); os.close(fd)' "$d/sparse" "$BIG_MIB"
    e=$(now)
    measure "4 KiB write + fsync in its middle" s "$t" "$(echo "$e-$s" | bc -l)"
    rm -f "$d/sparse"
  fi

  if [ -n "${pid[$t]:-}" ] && want rss; then
    reset_hwm "${pid[$t]}"
    sample_anon "${pid[$t]}" "$work/anon" & sampler=$!
    dd if=/dev/urandom of="$d/huge" bs=1M count="$BIG_MIB" conv=fsync status=none
    kill "$sampler"; wait "$sampler" 2>/dev/null || true
    measure "peak server RSS writing ${BIG_MIB} MiB" MiB "$t" "$(hwm "${pid[$t]}")"
    measure "peak server anonymous RSS writing ${BIG_MIB} MiB" MiB "$t" "$(cat "$work/anon")"
    rm -f "$d/huge"
    # Pages (on loopback: directories) touched one after another.
    top=$([ "$t" = ledgerfs ] && echo "$work/lf/pages" || echo "$d/pages")
    mkdir -p "$top"
    reset_hwm "${pid[$t]}"
    head -c 102400 /dev/urandom >"$work/100k"
    sample_anon "${pid[$t]}" "$work/anon" & sampler=$!
    for i in $(seq "$PAGES"); do mkdir "$top/p$i"; cp "$work/100k" "$top/p$i/f"; done
    kill "$sampler"; wait "$sampler" 2>/dev/null || true
    measure "peak server RSS, ${PAGES} pages touched" MiB "$t" "$(hwm "${pid[$t]}")"
    measure "peak server anonymous RSS, ${PAGES} pages touched" MiB "$t" "$(cat "$work/anon")"
  fi
done

printf '\nchunker+hash ceiling (cas.BenchmarkChunkAndHash): %s MB/s; cas.BenchmarkWriter: %s MB/s\n' "$ceiling" "$writer"
for mib in 4 "$SIZE_MIB"; do
  [ ! -f "$work/sync-edit-$mib.txt" ] || echo "ledgerfs, 4 KiB pwrite+fdatasync in a $mib MiB file: $(cat "$work/sync-edit-$mib.txt")"
done
# The table and the targets (BENCHMARKS.md), judged on this run's figures.
{
  for w in "${rows[@]}"; do
    name=${w%|*}; unit=${w#*|}
    for t in "${order[@]}"; do
      v=${res["$name|$t"]:-}
      [ -z "$v" ] || printf '%s\t%s\t%s\t%s\n' "$name" "$unit" "$t" "$v"
    done
  done
  for w in "${rows[@]}"; do
    name=${w%|*}
    for t in "${order[@]}"; do
      v=${cpu["$name|$t"]:-}
      [ -z "$v" ] || printf '%s\t%s\t%s\t%s\n' "$name: server CPU-s" s "$t" "$v"
    done
  done
} >"$work/figures.tsv"
python3 bench/report.py "$work/figures.tsv"
