# Sourced by the bench scripts that serve one mount at a time, with the
# script's name and, optionally, a directory to work in and keep: work (that
# directory, else a new scratch one), and on exit the mount at $mnt
# unmounted, the server $pid waited for and work removed (a kept one's
# repository only).
if [ -n "${2:-}" ]; then
  work=$2 keep=1
  mkdir -p "$work"
else
  work=$(mktemp -d "/tmp/ledgerfs-$1.XXXXXX") keep=
fi
mnt="$work/mnt" pid=
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; fi
  [ -z "$pid" ] || wait "$pid" 2>/dev/null || true
  if [ -n "$keep" ]; then rm -rf "$work/repo"; else rm -rf "$work"; fi
}
trap cleanup EXIT
