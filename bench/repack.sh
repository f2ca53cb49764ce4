#!/usr/bin/env bash
# Measures what a collection of the remote store leaves after most of a
# page's files are deleted: a mount writes FILES files of FILE_KIB KiB of
# random data into one page, syncs it to versitygw on 127.0.0.1 (MinIO
# instead with MINIO=PATH-OF-ITS-BINARY), deletes all but one file in ten,
# syncs again, and ledgerfs gc --remote --keep-last 1 --grace 0 collects the
# repository and the store. Printed: the packs' bytes at the peak and after,
# against the bytes of the files left (what the store must still hold), and
# the collection's time.
#
#   bench/repack.sh [WORKDIR]          (as root, for the mount)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d /tmp/ledgerfs-repack.XXXXXX)}
FILES=${FILES:-1000} FILE_KIB=${FILE_KIB:-64}
mkdir -p "$work"
go build -o "$work/ledgerfs" ./cmd/ledgerfs
. bench/s3.sh
s3_start repack
spid=$s3pid
# MinIO keeps an object as a directory with an xl.meta (and its parts).
if [ -n "${MINIO:-}" ]; then
  packs() { find "$work/s3/repack/r/packs" -name part.1 -o -name xl.meta -size +1k 2>/dev/null | xargs -r du -cb | tail -1 | cut -f1; }
else
  packs() { find "$work/s3/repack/r/packs" -type f -print0 | du -cb --files0-from=- | tail -1 | cut -f1; }
fi
mnt=$work/mnt lpid=
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" || true; fi
  [ -z "$lpid" ] || wait "$lpid" 2>/dev/null || true
  kill "$spid" 2>/dev/null || true
  rm -rf "$work/s3" "$work/repo"
}
trap cleanup EXIT
mountrepo() { mkdir -p "$mnt"; "$work/ledgerfs" mount "$work/repo" "$mnt" >>"$work/mount.log" 2>&1 & lpid=$!; for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done; }
unmountrepo() { umount "$mnt"; wait "$lpid"; lpid=; }

mountrepo
mkdir -p "$mnt/home/work"
for i in $(seq "$FILES"); do head -c "$((FILE_KIB * 1024))" /dev/urandom >"$mnt/home/work/f$i"; done
unmountrepo
"$work/ledgerfs" sync "$work/repo" --remote "s3://repack/r" --endpoint "$endpoint" >/dev/null
peak=$(packs)
mountrepo
for i in $(seq "$FILES"); do [ $((i % 10)) -eq 0 ] || rm "$mnt/home/work/f$i"; done
left=$(du -cb "$mnt"/home/work/f* | tail -1 | cut -f1)
unmountrepo
"$work/ledgerfs" sync "$work/repo" >/dev/null
s=$(date +%s.%N)
"$work/ledgerfs" gc --remote --keep-last 1 --grace 0 "$work/repo"
e=$(date +%s.%N)
after=$(packs)
printf 'files: %d of %d KiB, %d left (%d bytes)\n' "$FILES" "$FILE_KIB" "$((FILES / 10))" "$left"
printf 'packs: %d bytes at the peak, %d after the collection (%.1f %% of the files left)\n' "$peak" "$after" "$(echo "100*$after/$left" | bc -l)"
printf 'collection: %.1f s\n' "$(echo "$e-$s" | bc -l)"
