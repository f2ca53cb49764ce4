#!/usr/bin/env bash
# How long a writer of a page waits for an explicit collection of the page
# (.collect): one build, RUNS (3) fresh mounts, each with a page of 18,000
# commits under keep-last=1 and a writer rewriting one file of it in a loop
# (bench/collectwrites.py says what is printed).
#
#   bench/collectwrites.sh LEDGERFS_BINARY
set -euo pipefail
bin=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
for _ in $(seq "${RUNS:-3}"); do
	dir=$(mktemp -d)
	mkdir "$dir/mnt"
	"$bin" mount --collect-every 0 "$dir/repo" "$dir/mnt" >"$dir/log" 2>&1 &
	pid=$!
	trap 'umount "$dir/mnt" 2>/dev/null || true; wait $pid || true; rm -rf "$dir"' EXIT
	for _ in $(seq 100); do mountpoint -q "$dir/mnt" && break; sleep 0.1; done
	mkdir -p "$dir/mnt/l/p"
	echo keep-last=1 >"$dir/mnt/l/p/.ledger/retention"
	python3 "$here/collectwrites.py" "$dir/mnt" setup
	python3 "$here/collectwrites.py" "$dir/mnt" idle
	python3 "$here/collectwrites.py" "$dir/mnt" collect
	grep 'msg=collected' "$dir/log" | tail -1 | sed 's/^.*msg=collected /server: /'
	umount "$dir/mnt"
	wait $pid || true
	rm -rf "$dir"
	trap - EXIT
done
