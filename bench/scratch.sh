# Sourced by the bench scripts that serve one mount at a time, with the
# script's name as argument: work, a scratch directory, and on exit the
# mount at $mnt unmounted, the server $pid waited for and work removed.
work=$(mktemp -d "/tmp/ledgerfs-$1.XXXXXX")
mnt="$work/mnt" pid=
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; fi
  [ -z "$pid" ] || wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
