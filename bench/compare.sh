#!/usr/bin/env bash
# Measures the same workloads, in one run, on a native directory, on go-fuse's
# example/loopback over a native directory, and on a fresh ledgerfs page, and
# prints every figure with its ratio to native and to loopback.
#
#   bench/compare.sh [WORKDIR]        (as root, so that caches can be dropped)
#
# SIZE_MIB (1024), BIG_MIB (4096), SMALL_FILES (10000) and LS_FILES (100000)
# scale the workloads.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-bench.XXXXXX)}
SIZE_MIB=${SIZE_MIB:-1024}
BIG_MIB=${BIG_MIB:-4096}
SMALL_FILES=${SMALL_FILES:-10000}
LS_FILES=${LS_FILES:-100000}
GOSRC=$(go env GOROOT)/src

mkdir -p "$work"
go build -o "$work/ledgerfs" ./cmd/ledgerfs
go build -o "$work/loopback" github.com/hanwen/go-fuse/v2/example/loopback

pids=()
cleanup() {
  for m in "$work/lb" "$work/lf"; do
    umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

mkdir -p "$work/native" "$work/lb-under" "$work/lb" "$work/lf"
"$work/loopback" "$work/lb" "$work/lb-under" >"$work/loopback.log" 2>&1 &
lbpid=$!; pids+=($lbpid)
"$work/ledgerfs" mount "$work/repo" "$work/lf" >"$work/ledgerfs.log" 2>&1 &
lfpid=$!; pids+=($lfpid)
for m in lb lf; do
  for _ in $(seq 100); do mountpoint -q "$work/$m" && break; sleep 0.1; done
  mountpoint -q "$work/$m" || { echo "mount $m failed"; cat "$work"/*.log; exit 1; }
done
mkdir -p "$work/lf/bench/page"
declare -A dir=([native]="$work/native" [loopback]="$work/lb" [ledgerfs]="$work/lf/bench/page")
declare -A pid=([loopback]=$lbpid [ledgerfs]=$lfpid)
order=(native loopback ledgerfs)

drop_caches() { sync; if [ "$(id -u)" = 0 ]; then echo 3 >/proc/sys/vm/drop_caches; fi; }
now() { date +%s.%N; }
hwm() { awk '/VmHWM/{print int($2/1024)}' "/proc/$1/status"; }

# Source data, generated once on the native disk (random: nothing dedups).
head -c "$((SIZE_MIB << 20))" /dev/urandom >"$work/src.bin"

declare -A res
measure() { # name unit target seconds-or-value
  res["$1|$3"]=$4
}

for t in "${order[@]}"; do
  d=${dir[$t]}
  echo "== $t: $d" >&2
  drop_caches
  s=$(now); dd if="$work/src.bin" of="$d/big" bs=1M conv=fsync status=none; e=$(now)
  measure "seq write ${SIZE_MIB} MiB" MB/s "$t" "$(echo "$SIZE_MIB*1.048576/($e-$s)" | bc -l)"
  drop_caches
  s=$(now); dd if="$d/big" of=/dev/null bs=1M status=none; e=$(now)
  measure "cold seq read ${SIZE_MIB} MiB" MB/s "$t" "$(echo "$SIZE_MIB*1.048576/($e-$s)" | bc -l)"
  rm -f "$d/big"

  mkdir -p "$d/small"
  s=$(now)
  python3 - "$d/small" "$SMALL_FILES" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
buf = os.urandom(4096)
for i in range(n):
    with open(os.path.join(d, "f%06d" % i), "wb") as f:
        f.write(buf)
PY
  e=$(now)
  measure "${SMALL_FILES} x 4 KiB creates" files/s "$t" "$(echo "$SMALL_FILES/($e-$s)" | bc -l)"

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

  drop_caches
  s=$(now); cp -a "$GOSRC" "$d/gosrc"; e=$(now)
  measure "cp -a GOROOT/src" s "$t" "$(echo "$e-$s" | bc -l)"

  if [ -n "${pid[$t]:-}" ]; then
    echo 5 >"/proc/${pid[$t]}/clear_refs" 2>/dev/null || true # reset the peak
    dd if=/dev/urandom of="$d/huge" bs=1M count="$BIG_MIB" conv=fsync status=none
    measure "peak server RSS during ${BIG_MIB} MiB write" MiB "$t" "$(hwm "${pid[$t]}")"
    rm -f "$d/huge"
  fi
done

printf '\n%-40s %10s %10s %10s %8s %8s\n' workload native loopback ledgerfs "lf/nat" "lf/lb"
for w in "seq write ${SIZE_MIB} MiB|MB/s" "cold seq read ${SIZE_MIB} MiB|MB/s" "${SMALL_FILES} x 4 KiB creates|files/s" \
         "ls -l ${LS_FILES} entries|s" "cp -a GOROOT/src|s" "peak server RSS during ${BIG_MIB} MiB write|MiB"; do
  name=${w%|*}; unit=${w#*|}
  n=${res["$name|native"]:-}; l=${res["$name|loopback"]:-}; f=${res["$name|ledgerfs"]:-}
  rn=$( [ -n "$n" ] && echo "scale=2; $f/$n" | bc -l || echo -); rl=$(echo "scale=2; $f/$l" | bc -l)
  printf '%-40s %10.2f %10.2f %10.2f %8s %8s  %s\n' "$name" "${n:-0}" "$l" "$f" "$rn" "$rl" "$unit"
done
