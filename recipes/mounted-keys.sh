#!/bin/bash
# mounted-keys COPY: run in a container just before the job's sshd starts, as the job's
# user (root or not). COPY is a path relative to the user's home, the first of the sshd's
# AuthorizedKeysFile (render/shell.py, KEYS_COPY).
#
# The MPI Operator mounts its SSH Secret over ~/.ssh on a tmpfs of mode 1777, and sshd's
# StrictModes refuses every key under a directory others can write ("bad ownership or
# modes for directory"). Such a ~/.ssh gets a private copy of its authorized_keys (mode 0600,
# owned by the user, in a 0700 directory of the user's), which sshd reads with StrictModes
# left on. The copy is made only when nobody but root and the user can have written those
# keys: ~/.ssh is owned by one of them and has the sticky bit (others may add names there
# but cannot replace or remove root's), and everything in it is owned by root or the user
# and, symlinks aside, writable by nobody else. A ~/.ssh others can write that fails these
# checks: no copy, status 1 and one line saying why (the container's start stops there;
# sshd would refuse those keys anyway). Any other ~/.ssh gets no copy (an old one is
# removed): sshd reads ~/.ssh/authorized_keys as it always does.
set -u

say() { echo "mounted-keys: $*" >&2; }

copy_rel=${1:-}
case $copy_rel in
  ''|/*|*..*) say "usage: mounted-keys COPY (a path under the home directory)"; exit 2 ;;
esac
me=$(id -u)
home=$(getent passwd "$me" | cut -d: -f6)
home=${home:-$HOME}
dir=$home/.ssh
keys=$dir/authorized_keys
copy=$home/$copy_rel
copy_dir=$(dirname -- "$copy")

drop() { rm -f -- "$copy"; exit 0; }

[ -d "$dir" ] && [ -f "$keys" ] || drop
mode=$(stat -c %a -- "$dir") || drop
if (( (8#$mode & 8#022) == 0 )); then drop; fi  # StrictModes accepts it as it is

refuse() {
  say "$dir (mode $mode) is writable by others and $*:" \
    "no copy of its authorized_keys; sshd will refuse the keys there"
  rm -f -- "$copy"
  exit 1
}
owner=$(stat -c %u -- "$dir")
[ "$owner" = 0 ] || [ "$owner" = "$me" ] || refuse "owned by uid $owner"
(( (8#$mode & 8#1000) != 0 )) || refuse "has no sticky bit (others could replace its files)"
foreign=$(find "$dir" -mindepth 1 \( \( ! -uid 0 ! -uid "$me" \) -o \( ! -type l -perm /022 \) \) \
  -print -quit 2>&1) || refuse "cannot be read whole"
[ -z "$foreign" ] || refuse "holds $foreign, owned or writable by another user"
real=$(readlink -f -- "$keys") || refuse "its authorized_keys does not resolve"
case $real in
  "$dir"/*) ;;
  *) refuse "its authorized_keys leads out of it, to $real" ;;
esac

install -d -m 0700 -- "$copy_dir" || exit 1
copy_mode=$(stat -c %a -- "$copy_dir") || exit 1
if [ "$(stat -c %u -- "$copy_dir")" != "$me" ] || (( (8#$copy_mode & 8#022) != 0 )); then
  say "$copy_dir is not this user's own directory: no copy"; exit 1
fi
tmp=$(mktemp -- "$copy_dir/.authorized_keys.XXXXXX") || exit 1
if cat -- "$real" > "$tmp" && chmod 0600 -- "$tmp" && mv -f -- "$tmp" "$copy"; then
  say "$dir is mode $mode (a mounted Secret): sshd reads its keys from a private copy, $copy"
else
  rm -f -- "$tmp"
  exit 1
fi
