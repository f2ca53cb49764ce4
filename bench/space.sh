#!/usr/bin/env bash
# Measures what compression and collection do to space and speed, on fresh
# repositories, with compression on (zstd) and off (none) in turn, ROUNDS
# times each, alternating, so that a busy machine affects both alike:
#
#   write   dd of SIZE_MIB MiB of random (incompressible) data, fsynced
#   cp      cp -r of GOROOT/src (compressible source code), into another
#           repository
#   raw     du -sb of that repository after unmount / du -sb of GOROOT/src
#   gc      ledgerfs gc of it, which compresses what was written (the
#           default policy keeps every commit): its time
#   ratio   du -sb after it / du -sb of GOROOT/src
#   cold    tar c of the copied GOROOT/src after a remount and dropped caches
#   left    rm -rf of everything, then ledgerfs gc --keep-last 1: du -sb
#           after / at the peak
#
#   bench/space.sh [WORKDIR]       (as root, so that caches can be dropped)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-space.XXXXXX)}
SIZE_MIB=${SIZE_MIB:-1024}
ROUNDS=${ROUNDS:-3}
GOSRC=$(go env GOROOT)/src
mkdir -p "$work"
go build -o "$work/ledgerfs" ./cmd/ledgerfs
lf=$work/ledgerfs
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { umount "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
head -c $((SIZE_MIB << 20)) /dev/urandom > "$work/random"
src_bytes=$(du -sb "$GOSRC" | cut -f1)

secs() { local s; s=$(date +%s.%N); "$@" >/dev/null; echo "$(date +%s.%N) - $s" | bc; }
serve() { "$lf" mount "$1" "$mnt" --collect-every 0 >>"$work/log" 2>&1 & while ! mountpoint -q "$mnt"; do sleep 0.05; done; }
stop() { "$lf" umount "$mnt" >/dev/null; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

printf '%-5s %-5s %11s %6s %6s %6s %6s %7s %9s\n' mode round "write MiB/s" "cp s" raw "gc s" ratio "cold s" left/peak
for r in $(seq "$ROUNDS"); do
  for mode in zstd none; do
    a=$work/a-$mode b=$work/b-$mode
    rm -rf "$a" "$b"
    for repo in "$a" "$b"; do
      serve "$repo"; stop
      "$lf" config "$repo" compression=$mode >/dev/null
    done
    serve "$a"
    mkdir -p "$mnt/l/p"
    drop
    w=$(secs dd if="$work/random" of="$mnt/l/p/random" bs=1M conv=fsync status=none)
    stop
    serve "$b"
    mkdir -p "$mnt/l/p"
    c=$(secs cp -r "$GOSRC" "$mnt/l/p/src")
    sync "$mnt/l/p"
    stop
    raw=$(du -sb "$b" | cut -f1)
    g=$(secs "$lf" gc "$b")
    peak=$(du -sb "$b" | cut -f1)
    serve "$b"
    drop
    cold=$(secs tar cf - -C "$mnt/l/p" src)
    rm -rf "$mnt/l/p/src"
    stop
    "$lf" gc --keep-last 1 "$b" >/dev/null
    left=$(du -sb "$b" | cut -f1)
    printf '%-5s %-5s %11.0f %6.2f %6.3f %6.2f %6.3f %7.2f %9.4f\n' "$mode" "$r" "$(echo "$SIZE_MIB / $w" | bc -l)" "$c" \
      "$(echo "$raw / $src_bytes" | bc -l)" "$g" "$(echo "$peak / $src_bytes" | bc -l)" "$cold" "$(echo "$left / $raw" | bc -l)"
  done
done
