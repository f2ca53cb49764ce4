#!/usr/bin/env bash
# Measures what compression and collection do to space and speed, on fresh
# repositories, with compression on (zstd) and off (none) in turn, ROUNDS
# times each, alternating, so that a busy machine affects both alike:
#
#   write   dd of SIZE_MIB MiB of random (incompressible) data, fsynced
#   cp      cp -r of GOROOT/src (compressible source code)
#   ratio   du -sb of the repository after unmount / du -sb of GOROOT/src
#   cold    tar c of the copied GOROOT/src after a remount and dropped caches
#   collect rm -rf of everything, then ledgerfs gc --keep-last 1 on the
#           unmounted repository: its time and du -sb after / at the peak
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

printf '%-5s %-5s %9s %8s %7s %8s %9s %9s\n' mode round "write MiB/s" "cp s" ratio "cold s" "gc s" "left/peak"
for r in $(seq "$ROUNDS"); do
  for mode in zstd none; do
    repo=$work/repo-$mode
    rm -rf "$repo"
    serve "$repo"; stop
    "$lf" config "$repo" compression=$mode >/dev/null
    serve "$repo"
    mkdir -p "$mnt/l/p"
    drop
    w=$(secs dd if="$work/random" of="$mnt/l/p/random" bs=1M conv=fsync status=none)
    c=$(secs cp -r "$GOSRC" "$mnt/l/p/src")
    sync "$mnt/l/p"
    stop
    peak=$(du -sb "$repo" | cut -f1)
    rm_random=$(du -sb "$repo" | cut -f1)
    serve "$repo"
    drop
    cold=$(secs tar cf - -C "$mnt/l/p" src)
    rm -rf "$mnt/l/p/random"
    stop
    src_ratio=$(echo "scale=3; ($rm_random - $(du -sb "$work/random" | cut -f1)) / $src_bytes" | bc)
    serve "$repo"
    rm -rf "$mnt/l/p/src"
    sync "$mnt/l/p"
    stop
    g=$(secs "$lf" gc --keep-last 1 "$repo")
    left=$(du -sb "$repo" | cut -f1)
    printf '%-5s %-5s %9.0f %8.2f %7s %8.2f %9.2f %9.4f\n' "$mode" "$r" "$(echo "$SIZE_MIB / $w" | bc -l)" "$c" "$src_ratio" "$cold" "$g" "$(echo "$left / $peak" | bc -l)"
  done
done
