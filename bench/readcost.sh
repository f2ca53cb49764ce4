#!/usr/bin/env bash
# What a cold sequential read costs: MB/s, the server's CPU-seconds per GiB
# returned and the bytes it read from the disk per byte returned, for
# ledgerfs builds (A/B of a change) and go-fuse's loopback without
# passthrough (lb-nopt), medians of RUNS runs, interleaved.
#
#   bench/readcost.sh [REV ...]     (as root: caches are dropped, lb-nopt needs it)
#
# Each REV (default: HEAD) is built from a worktree. Each run writes a
# SIZE_MIB (1024) file of random bytes, restarts the server (so that none of
# its caches are warm), drops the kernel's caches and reads the file with
# dd at 1 MiB blocks.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "readcost.sh runs as root: it drops caches and mounts lb-nopt" >&2; exit 2; }
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(HEAD)
SIZE_MIB=${SIZE_MIB:-1024} RUNS=${RUNS:-3}
. bench/scratch.sh readcost

names=()
for rev in "${revs[@]}"; do
  name=$(git rev-parse --short "$rev")
  git worktree add -f --detach "$work/src" "$rev" >/dev/null
  (cd "$work/src" && go build -o "$work/ledgerfs-$name" ./cmd/ledgerfs)
  git worktree remove -f "$work/src"
  names+=("$name")
done
go build -o "$work/loopback" github.com/hanwen/go-fuse/v2/example/loopback
names+=(lb-nopt)
head -c $((SIZE_MIB << 20)) /dev/urandom >"$work/data"

# serve NAME STORE: mounts NAME over STORE at $mnt in the background; sets pid.
serve() {
  mkdir -p "$mnt"
  if [ "$1" = lb-nopt ]; then
    # Without CAP_SYS_ADMIN, loopback cannot hand files to the kernel: every
    # read is a request, as ledgerfs's are.
    (
      exec 3<>/dev/fuse
      mount -i -t fuse -o fd=3,rootmode=40000,user_id=0,group_id=0,max_read=131072 loopback "$mnt"
      exec setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin "$work/loopback" /dev/fd/3 "$2"
    ) >"$work/serve.log" 2>&1 &
  else
    "$work/ledgerfs-$1" mount --collect-after 0 --collect-every 0 "$2" "$mnt" >"$work/serve.log" 2>&1 &
  fi
  pid=$!
  for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
  mountpoint -q "$mnt" || { echo "mount of $1 failed:"; cat "$work/serve.log"; exit 1; }
}
unserve() { umount "$mnt"; wait "$pid" || true; pid=; }
# the server's process: the loopback's shell exec'd into it.
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
diskread() { awk '/^read_bytes/ {print $2}' "/proc/$pid/io"; }

out="$work/figures.tsv"
: >"$out"
for run in $(seq "$RUNS"); do
  for n in "${names[@]}"; do
    store="$work/store-$n"
    rm -rf "$store"; mkdir -p "$store"
    serve "$n" "$store"
    f="$mnt/f"
    [ "$n" = lb-nopt ] || { mkdir -p "$mnt/bench/page"; f="$mnt/bench/page/f"; }
    cp "$work/data" "$f"
    sync "$f"
    unserve
    serve "$n" "$store"
    sync; echo 3 >/proc/sys/vm/drop_caches
    c0=$(cpu) d0=$(diskread) s=$(date +%s.%N)
    dd if="$f" of=/dev/null bs=1M status=none
    e=$(date +%s.%N) c1=$(cpu) d1=$(diskread)
    tck=$(getconf CLK_TCK)
    python3 - "$n" "$run" "$SIZE_MIB" "$s" "$e" "$c0" "$c1" "$d0" "$d1" "$tck" >>"$out" <<'PY'
import sys
n, run, mib, s, e, c0, c1, d0, d1, tck = sys.argv[1:]
size = int(mib) << 20
took = float(e) - float(s)
cpu = (int(c1) - int(c0)) / int(tck)
print(f"{n}\t{run}\t{size / took / 1e6:.1f}\t{cpu / (size / 2**30):.2f}\t{(int(d1) - int(d0)) / size:.2f}")
PY
    unserve
    rm -rf "$store"
  done
done

python3 - "$out" "$SIZE_MIB" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, run, mbs, cpu, disk = line.split("\t")
    rows.setdefault(n, []).append((float(mbs), float(cpu), float(disk)))
print(f"cold sequential read of {sys.argv[2]} MiB with dd, medians of {len(next(iter(rows.values())))}")
print(f"{'server':10} {'MB/s':>8} {'CPU-s/GiB':>10} {'disk B/B':>9}   runs (MB/s)")
for n, rs in rows.items():
    med = [statistics.median(x[i] for x in rs) for i in range(3)]
    print(f"{n:10} {med[0]:8.1f} {med[1]:10.2f} {med[2]:9.2f}   " + " ".join(f"{x[0]:.0f}" for x in rs))
PY
