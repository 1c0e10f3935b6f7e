# shellcheck shell=bash
# hpcwizard's operations: the one place where files and blocks are changed and taken back.
# A plan's step is one call of an operation with its contents as a here-document; plan,
# the wizard's Review, the record and setup.sh show that call, and apply runs this library
# and then the call. Written once, tested on real files (tests/test_ops.py).
#
#   hw_file   PATH [--mode MODE] [--validate CMD] [--in-effect CMD]          <<'EOF' ... EOF
#   hw_block  PATH [--mode MODE] [--top] [--validate CMD] [--in-effect CMD]  <<'EOF' ... EOF
#   hw_dropin PATH --else-block FILE --include REGEX [--mode MODE] [--validate CMD]
#             [--in-effect CMD]                                              <<'EOF' ... EOF
#
# hw_file owns PATH whole. hw_block keeps a marked block (# BEGIN hpcwizard ... # END
# hpcwizard) in a file others own, at the end or (--top) at the top. hw_dropin writes PATH
# when FILE includes PATH's directory (REGEX matches a line of FILE), else a block at the
# top of FILE. A symlink is followed: its target changes and the link stays a link, but
# only when that target is the running user's own (a link to another user's file is
# refused, changing nothing). A directory hw_block made goes with its undo when empty.
#
# $HW_MODE says what a call does (default run):
#   check  exit 0 when nothing is left to do; changes nothing
#   run    make the change; running it again changes nothing more. The file is replaced in
#          one rename; --validate runs after it and, failing, puts the previous file back.
#          A kill at any point leaves the old file or the new one, and a new one whose
#          validation did not finish is validated again by the next run (check says "not
#          done" until then).
#   undo   take back what this operation gave and nothing else: the file as it was, with
#          its mode and owner, or no file when there was none. A version someone changed
#          after hpcwizard wrote it is never dropped: it is kept as PATH.hpcwizard-kept,
#          and the output says so.
#   diff   print the unified diff the change would make; changes nothing
#
# --in-effect CMD: after the change, each "Key value" line of the contents must be what CMD
# reports (sshd -T, ssh -G host): lower-case "key value" lines. A setting another file
# overrides fails the step, naming that file, and the previous file is put back.
#
# What undo needs is kept in the state directory ($HW_STATE; default /var/lib/hpcwizard/ops
# for root, ~/.local/state/hpcwizard/ops for others), per real path KEY (a hash of it):
# KEY.path (the path, for people), KEY.before (absent, or "MODE UID GID"), KEY.orig (the
# bytes before, for hw_file), KEY.nl (hw_block added a final newline), KEY.ours (sha256 of
# what was written: the file, or the block), and, while a change is not yet validated,
# KEY.prev (what to put back) and KEY.pending (sha256 of the change).

HW_BEGIN='# BEGIN hpcwizard'
HW_FILE_LIMIT=1048576  # bytes: a configuration file larger is refused, not read (sed, ssh -G)
HW_END='# END hpcwizard'

_hw_say() { printf 'hpcwizard: %s\n' "$*" >&2; }
_hw_die() { _hw_say "$*"; exit 1; }

_hw_state_dir() {
  if [ -n "${HW_STATE:-}" ]; then printf '%s\n' "$HW_STATE"
  elif [ "$EUID" = 0 ]; then printf '%s\n' /var/lib/hpcwizard/ops
  else printf '%s\n' "${XDG_STATE_HOME:-$HOME/.local/state}/hpcwizard/ops"; fi
}

_hw_sum() { local s; s=$(sha256sum < "$1") && printf '%s\n' "${s%% *}"; }

# _hw_hash VAR TEXT N: VAR becomes the first N hex digits of TEXT's sha256 (a state key).
_hw_hash() { local s; s=$(printf '%s' "$2" | sha256sum) && printf -v "$1" '%s' "${s:0:$3}"; }

# After an undo: the state directory goes once nothing is left in it, and its hpcwizard
# parent too when that is empty (/var/lib/hpcwizard): undo leaves no trace of hpcwizard.
_hw_tidy() {
  local s parent
  s=$(_hw_state_dir)
  rmdir -- "$s" 2>/dev/null || return 0
  parent=$(dirname -- "$s")
  if [ "$(basename -- "$parent")" = hpcwizard ]; then rmdir -- "$parent" 2>/dev/null || true; fi
}

# _hw_put SRC DEST MODE [UID GID]: SRC's bytes become DEST in one rename.
_hw_put() {
  local src=$1 dest=$2 mode=$3 tmp
  tmp=$(mktemp "$(dirname -- "$dest")/.hpcwizard.XXXXXX") || return 1
  if ! { cat -- "$src" > "$tmp" && chmod "$mode" "$tmp"; }; then
    rm -f -- "$tmp"; return 1
  fi
  if [ $# -ge 5 ]; then chown "$4:$5" "$tmp" 2>/dev/null || true; fi
  # -T: DEST a directory is a failure, not a move into it
  mv -f -T -- "$tmp" "$dest" || { rm -f -- "$tmp"; return 1; }
}

# _hw_put_like SRC DEST: SRC becomes DEST with DEST's own mode and owner (new file: 0600).
_hw_put_like() {
  if [ -e "$2" ]; then
    # shellcheck disable=SC2046
    _hw_put "$1" "$2" $(stat -c '%a %u %g' -- "$2")
  else
    _hw_put "$1" "$2" "${3:-0600}"
  fi
}

# What a killed run left beside a file: our temporary files (mktemp's name, ours alone).
_hw_sweep() { rm -f -- "$(dirname -- "$1")"/.hpcwizard.??????; }

_hw_write_state() {  # _hw_write_state FILE TEXT: a state file, whole or not at all
  printf '%s\n' "$2" > "$1.tmp" && mv -f -- "$1.tmp" "$1"
}

# Common start of every operation: sets path real key new work mode.
_hw_start() {
  path=$1
  mode=${HW_MODE:-run}
  case $mode in check|run|undo|diff) ;; *) _hw_die "HW_MODE=$mode: use check, run, undo or diff" ;; esac
  real=$(realpath -m -- "$path")
  state=$(_hw_state_dir)
  _hw_hash key "$real" 16
  key=$state/$key
  # nothing remembered for this file: the run changed nothing (refused, or never reached
  # it), so undo has nothing to take back, whatever the file has become since
  if [ "$mode" = undo ] && ! compgen -G "$key.*" > /dev/null; then
    _hw_say "$path: nothing to take back (hpcwizard did not change it)"
    exit 0
  fi
  if [ "$mode" = run ] || [ "$mode" = undo ]; then _hw_own_link; fi
  _hw_plain_file
  _hw_work
  new=$work/new
  if [ "$mode" = undo ]; then : > "$new"; else cat > "$new"; fi
  if [ "$mode" = run ] || [ "$mode" = undo ]; then
    install -d -m 0700 -- "$state"
    _hw_sweep "$real"
    rm -f -- "$key".*.tmp
  fi
}

# work: a private temporary directory, gone however the operation ends (a kill -9 aside):
# bash runs no EXIT trap for a signal it does not catch, so TERM, INT and HUP become exits.
_hw_work() {
  work=$(mktemp -d) || _hw_die "cannot make a temporary directory; nothing was changed"
  # shellcheck disable=SC2064
  trap "rm -rf -- '$work'" EXIT
  _hw_exit_on_signals
}

_hw_exit_on_signals() { trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM; }

# The file changed is a regular file of a sane size, or absent: a directory or device in
# its place, or a file of gigabytes, is refused before any temporary file is made.
_hw_plain_file() {
  local size
  if [ -e "$real" ] && [ ! -f "$real" ]; then
    _hw_die "$path is not a regular file ($(stat -c %F -- "$real" 2>/dev/null || echo unknown)): hpcwizard changes only regular files; nothing was changed"
  fi
  size=$(stat -c %s -- "$real" 2>/dev/null) || return 0
  if [ "$size" -gt "$HW_FILE_LIMIT" ]; then
    _hw_die "$path is $size bytes, more than a configuration file hpcwizard reads ($HW_FILE_LIMIT bytes): hpcwizard does not read or change it; nothing was changed"
  fi
}

# Through a link, only a file of the user who runs the operation is changed (or, when it is
# absent, one under the nearest directory of theirs): a link to another user's file (root's, when a user
# runs it; a user's, when root does) is refused before anything is written.
_hw_own_link() {
  local at=$real
  [ "$(realpath -m -s -- "$path")" != "$real" ] || return 0
  while [ ! -e "$at" ]; do at=$(dirname -- "$at"); done
  [ -O "$at" ] && return 0
  _hw_die "$path leads to $at, which belongs to $(stat -c %U -- "$at" 2>/dev/null || echo another user), not to $(id -un): hpcwizard changes no other user's file through a link; nothing was changed"
}

# A directory the change made goes with its undo, when nothing else is left in it.
_hw_made_dir() { : > "$key.dir"; }
_hw_rmdir_made() {
  if [ -e "$key.dir" ]; then rmdir -- "$(dirname -- "$real")" 2>/dev/null || true; fi
}

_hw_diff() {  # _hw_diff CURRENT WANTED: the unified diff, labelled with the path
  local from=$1
  [ -e "$from" ] || from=/dev/null
  diff -u --label "$path" --label "$path (hpcwizard)" -- "$from" "$2" || true
}

# Is the file (or block) at $real what this operation wrote, or the change in flight?
_hw_is_ours() {  # _hw_is_ours SUM
  { [ -e "$key.ours" ] && [ "$1" = "$(cat -- "$key.ours")" ]; } \
    || { [ -e "$key.pending" ] && [ "$1" = "$(cat -- "$key.pending")" ]; }
}

# _hw_kept SRC FILE: SRC's bytes kept beside FILE as FILE.hpcwizard-kept (then .1, ...),
# with FILE's mode and owner: SRC may be a copy of part of it made with other permissions,
# and a private file (~/.ssh/config, 0600) must not come out readable by all. The copy is
# made 0600 and only then given that mode, so it is never wider. Sets kept to its path.
_hw_kept() {
  local n=1 perms
  kept=$2.hpcwizard-kept
  while [ -e "$kept" ] || [ -L "$kept" ]; do kept=$2.hpcwizard-kept.$n; n=$((n + 1)); done
  perms=$(stat -c '%a %u %g' -- "$2" 2>/dev/null) || perms="600 $(id -u) $(id -g)"
  # shellcheck disable=SC2086
  _hw_put "$1" "$kept" $perms
}

# Someone changed what hpcwizard wrote: keep their version beside it, and say so.
_hw_keep() {  # _hw_keep SRC
  local kept
  _hw_kept "$1" "$real"
  _hw_say "$path was changed after hpcwizard wrote it; that version is kept in $kept"
}

# The previous file, kept until the change is validated; then the change is marked pending.
_hw_hold() {  # _hw_hold SUM_OF_CHANGE
  if [ -e "$real" ]; then cp -p -- "$real" "$key.prev.tmp" && mv -f -- "$key.prev.tmp" "$key.prev"
  else rm -f -- "$key.prev"; : > "$key.prev-absent"; fi
  _hw_write_state "$key.pending" "$1"
}

_hw_put_back() {
  if [ -e "$key.prev" ]; then
    local tmp
    tmp=$(mktemp "$(dirname -- "$real")/.hpcwizard.XXXXXX") || return 1
    { cp -p -- "$key.prev" "$tmp" && mv -f -T -- "$tmp" "$real"; } || { rm -f -- "$tmp"; return 1; }
  elif [ -e "$key.prev-absent" ]; then
    rm -f -- "$real"
  fi
}

_hw_release() { rm -f -- "$key.prev" "$key.prev-absent" "$key.pending"; }

# A change put back: a first one leaves nothing to remember (the file is as it was).
_hw_forget() {
  _hw_release
  if [ ! -e "$key.ours" ]; then _hw_rmdir_made; rm -f -- "$key".*; _hw_tidy; fi
}

# After the change: --validate, then --in-effect; on failure put the previous file back.
_hw_settle() {  # _hw_settle SUM
  local out=$work/validate.out
  if [ -n "$validate" ] && ! ( eval "$validate" ) > "$out" 2>&1; then
    cat -- "$out" >&2
    _hw_put_back; _hw_forget
    _hw_die "the new $path failed its test ($validate); the previous one was put back"
  fi
  if [ -n "$in_effect" ] && ! _hw_in_effect; then
    _hw_put_back; _hw_forget
    exit 1
  fi
  _hw_write_state "$key.ours" "$1"
  _hw_release
  _hw_changed
}

# --on-change CMD: what must follow a change that was made or taken back (a reload).
_hw_changed() { if [ -n "$on_change" ]; then eval "$on_change"; fi; }

# Every "Key value" of the contents, as CMD reports it. Keys and values compare in lower
# case, yes/true and no/false alike; a key that may be given more than once (Port,
# IdentityFile) needs its value among those reported, any other the first one reported.
_hw_norm() { tr '[:upper:]' '[:lower:]' | sed -e 's/^true$/yes/' -e 's/^false$/no/' -e 's/^without-password$/prohibit-password/'; }

_hw_in_effect() {
  local effective=$work/effective k v want got ok=0 files f
  if ! ( eval "$in_effect" ) > "$effective" 2>"$work/effective.err"; then
    cat -- "$work/effective.err" >&2
    _hw_say "could not read the settings in effect ($in_effect)"
    return 1
  fi
  while read -r k v; do
    case $k in ''|'#'*) continue ;; esac
    k=$(printf '%s' "$k" | tr '[:upper:]' '[:lower:]')
    case $k in host|match) continue ;; challengeresponseauthentication) k=kbdinteractiveauthentication ;; esac
    want=$(printf '%s\n' "$v" | _hw_norm)
    case $k in
      port|identityfile|certificatefile|listenaddress|sendenv|setenv)
        got=$(grep -i -- "^$k " "$effective" | cut -d' ' -f2- | _hw_norm)
        if printf '%s\n' "$got" | grep -qxF -- "$want"; then continue; fi ;;
      *)
        got=$(grep -i -m 1 -- "^$k " "$effective" | cut -d' ' -f2- | _hw_norm)
        [ "$got" = "$want" ] && continue ;;
    esac
    files=""
    for f in /etc/ssh/sshd_config /etc/ssh/sshd_config.d/*.conf /etc/ssh/ssh_config \
             /etc/ssh/ssh_config.d/*.conf "$HOME/.ssh/config"; do
      if [ -f "$f" ] && [ "$(realpath -m -- "$f")" != "$real" ] \
          && grep -qiE "^[[:space:]]*$k([[:space:]]|=)" -- "$f" 2>/dev/null; then
        files="$files $f"
      fi
    done
    _hw_say "$k is '$(printf '%s' "$got" | tr '\n' ' ')' in effect, not '$want' as $path says${files:+; set in:$files}"
    ok=1
  done < "$new"
  return $ok
}

_hw_options() {  # sets file_mode validate in_effect on_change top else_block include
  file_mode=0644 validate="" in_effect="" on_change="" top=0 else_block="" include=""
  while [ $# -gt 0 ]; do
    case $1 in
      --mode) file_mode=$2; shift 2 ;;
      --validate) validate=$2; shift 2 ;;
      --in-effect) in_effect=$2; shift 2 ;;
      --on-change) on_change=$2; shift 2 ;;
      --top) top=1; shift ;;
      --else-block) else_block=$2; shift 2 ;;
      --include) include=$2; shift 2 ;;
      *) _hw_die "unknown option $1" ;;
    esac
  done
}

# --- hw_file: a file hpcwizard owns whole ---------------------------------------------------

hw_file() (
  _hw_start "$1"; shift
  _hw_options "$@"
  case $mode in
    check)
      [ ! -e "$key.pending" ] && [ -f "$real" ] && cmp -s -- "$new" "$real" \
        && [ "$(stat -c %a -- "$real")" = "${file_mode#0}" ] ;;
    diff) _hw_diff "$real" "$new" ;;
    run) _hw_file_run ;;
    undo) _hw_file_undo; _hw_tidy ;;
  esac
)

_hw_file_run() {
  local sum dir
  sum=$(_hw_sum "$new")
  dir=$(dirname -- "$real")
  [ -d "$dir" ] || install -d -m 0755 -- "$dir"
  if [ -e "$key.pending" ] && [ -e "$real" ] && [ "$(_hw_sum "$real")" = "$(cat -- "$key.pending")" ] \
      && [ "$sum" = "$(cat -- "$key.pending")" ]; then
    _hw_settle "$sum"   # a killed run wrote it and never validated it
    return
  fi
  _hw_release
  if [ ! -e "$key.before" ]; then  # the first change: remember what was there
    if [ -e "$real" ]; then
      cp -p -- "$real" "$key.orig.tmp" && mv -f -- "$key.orig.tmp" "$key.orig"
      _hw_write_state "$key.before" "$(stat -c '%a %u %g' -- "$real")"
    else
      _hw_write_state "$key.before" absent
    fi
    _hw_write_state "$key.path" "$real"
  elif [ -e "$key.ours" ] && [ -e "$real" ] && ! _hw_is_ours "$(_hw_sum "$real")" \
      && ! cmp -s -- "$real" "$new"; then
    _hw_keep "$real"  # what hpcwizard wrote, changed since
  fi
  if cmp -s -- "$new" "$real" 2>/dev/null && [ "$(stat -c %a -- "$real")" = "${file_mode#0}" ]; then
    _hw_write_state "$key.ours" "$sum"; return 0
  fi
  _hw_hold "$sum"
  if [ -e "$real" ]; then
    _hw_put "$new" "$real" "$file_mode" "$(stat -c %u -- "$real")" "$(stat -c %g -- "$real")"
  else
    _hw_put "$new" "$real" "$file_mode"
  fi
  _hw_settle "$sum"
}

_hw_file_undo() {
  local before bmode buid bgid
  if [ ! -e "$key.before" ]; then rm -f -- "$key".*; return 0; fi  # it never changed this file
  before=$(cat -- "$key.before")
  if [ -e "$real" ] && ! _hw_is_ours "$(_hw_sum "$real")" \
      && ! { [ -e "$key.orig" ] && cmp -s -- "$real" "$key.orig"; }; then
    _hw_keep "$real"
  fi
  if [ "$before" = absent ]; then
    rm -f -- "$real"
  else
    read -r bmode buid bgid <<< "$before"
    _hw_put "$key.orig" "$real" "$bmode" "$buid" "$bgid"
  fi
  rm -f -- "$key".*
  _hw_changed
}

# --- hw_block: a marked block in a file others own --------------------------------------------

hw_block() (
  _hw_start "$1"; shift
  _hw_options "$@"
  local block=$work/block
  { printf '%s\n' "$HW_BEGIN"; cat -- "$new"; printf '%s\n' "$HW_END"; } > "$block"
  _hw_block_sane
  case $mode in
    check)
      [ ! -e "$key.pending" ] && [ -f "$real" ] \
        && _hw_block_of "$real" | cmp -s - "$block" ;;
    diff) _hw_block_wanted "$block" > "$work/wanted"; _hw_diff "$real" "$work/wanted" ;;
    run) _hw_block_run "$block" ;;
    undo) _hw_block_undo; _hw_tidy ;;
  esac
)

_hw_block_of() { sed -n "/^$HW_BEGIN\$/,/^$HW_END\$/p" -- "$1"; }
_hw_block_rest() { sed "/^$HW_BEGIN\$/,/^$HW_END\$/d" -- "$1"; }

# A BEGIN without its END would make sed take the rest of the file for the block.
_hw_block_sane() {
  [ -f "$real" ] || return 0
  local b e
  b=$(grep -cx -- "$HW_BEGIN" "$real" || true)
  e=$(grep -cx -- "$HW_END" "$real" || true)
  if [ "$b" != "$e" ] || [ "$b" -gt 1 ]; then
    _hw_die "$path has $b '$HW_BEGIN' and $e '$HW_END' lines: mend the block by hand (one of each, or none)"
  fi
}

# The file as it would be: what others wrote, and the block at the top or at the end. A
# last line without a newline gets one before the block (KEY.nl remembers it for undo).
_hw_block_wanted() {  # _hw_block_wanted BLOCK
  local rest=$work/rest
  if [ -f "$real" ]; then _hw_block_rest "$real" > "$rest"; else : > "$rest"; fi
  if [ "$top" = 1 ]; then
    cat -- "$1" "$rest"
  else
    cat -- "$rest"
    if [ -s "$rest" ] && [ -n "$(tail -c 1 -- "$rest")" ]; then echo; fi
    cat -- "$1"
  fi
}

_hw_block_run() {
  local block=$1 sum current dir
  sum=$(_hw_sum "$block")
  dir=$(dirname -- "$real")
  if [ ! -d "$dir" ]; then install -d -m 0700 -- "$dir"; _hw_made_dir; fi
  if [ -e "$key.pending" ] && [ -f "$real" ] && _hw_block_of "$real" | cmp -s - "$block"; then
    _hw_settle "$sum"; return   # a killed run wrote it and never validated it
  fi
  _hw_release
  if [ ! -e "$key.before" ]; then
    if [ -e "$real" ]; then _hw_write_state "$key.before" "$(stat -c '%a %u %g' -- "$real")"
    else _hw_write_state "$key.before" absent; fi
    _hw_write_state "$key.path" "$real"
  fi
  current=$work/current
  if [ -f "$real" ]; then _hw_block_of "$real" > "$current"; else : > "$current"; fi
  if [ -s "$current" ] && ! _hw_is_ours "$(_hw_sum "$current")" && ! cmp -s -- "$current" "$block"; then
    _hw_keep "$current"
  fi
  if [ -s "$current" ] && cmp -s -- "$current" "$block"; then
    _hw_write_state "$key.ours" "$sum"; return 0
  fi
  if [ "$top" != 1 ] && [ -f "$real" ] && [ -s "$real" ] && [ ! -s "$current" ] \
      && [ -n "$(tail -c 1 -- "$real")" ]; then
    : > "$key.nl"
  fi
  _hw_block_wanted "$block" > "$work/wanted"
  _hw_hold "$(_hw_sum "$block")"
  _hw_put_like "$work/wanted" "$real" "$file_mode"
  _hw_settle "$sum"
}

_hw_block_undo() {
  local current=$work/current rest=$work/rest size before
  if [ ! -e "$key.before" ] || [ ! -f "$real" ]; then _hw_rmdir_made; rm -f -- "$key".*; return 0; fi
  before=$(cat -- "$key.before")
  _hw_block_of "$real" > "$current"
  if [ ! -s "$current" ]; then rm -f -- "$key".*; return 0; fi
  if ! _hw_is_ours "$(_hw_sum "$current")"; then _hw_keep "$current"; fi
  _hw_block_rest "$real" > "$rest"
  if [ -e "$key.nl" ] && [ -s "$rest" ] && [ -z "$(tail -c 1 -- "$rest")" ]; then
    size=$(stat -c %s -- "$rest")
    truncate -s $((size - 1)) -- "$rest"
  fi
  if [ "$before" = absent ] && [ ! -s "$rest" ]; then
    rm -f -- "$real"
    _hw_rmdir_made
  else
    _hw_put_like "$rest" "$real"
  fi
  rm -f -- "$key".*
  _hw_changed
}

# --- hw_dropin: a drop-in file where the main file includes its directory, else a block -----

hw_dropin() (
  local path=$1 contents args=()
  shift
  _hw_options "$@"
  [ -n "$else_block" ] || _hw_die "hw_dropin $path: needs --else-block FILE"
  contents=$(mktemp)
  # shellcheck disable=SC2064
  trap "rm -f -- '$contents'" EXIT
  _hw_exit_on_signals
  if [ "${HW_MODE:-run}" != undo ]; then cat > "$contents"; fi
  [ -z "$validate" ] || args+=(--validate "$validate")
  [ -z "$in_effect" ] || args+=(--in-effect "$in_effect")
  [ -z "$on_change" ] || args+=(--on-change "$on_change")
  if [ "${HW_MODE:-run}" = undo ]; then
    hw_file "$path" "${args[@]}" < /dev/null
    hw_block "$else_block" "${args[@]}" < /dev/null
  elif _hw_includes "$else_block" "$path"; then
    hw_file "$path" --mode "$file_mode" "${args[@]}" < "$contents"
  else
    hw_block "$else_block" --top "${args[@]}" < "$contents"
  fi
)

# Does MAIN include PATH? (--include REGEX: a line of MAIN matches it; else an Include line
# of MAIN whose pattern matches PATH, a relative one taken from MAIN's directory.)
_hw_includes() {
  local main=$1 path base word pattern
  if [ -n "$include" ]; then grep -qsE -- "$include" "$main"; return; fi
  [ -f "$main" ] || return 1
  path=$(realpath -m -- "$2")
  base=$(dirname -- "$(realpath -m -- "$main")")
  local patterns
  while read -r word pattern; do
    case $word in [Ii]nclude) ;; *) continue ;; esac
    read -ra patterns <<< "$pattern"  # words, never expanded: the glob is matched, not run
    for pattern in "${patterns[@]}"; do
      case $pattern in /*) ;; *) pattern=$base/$pattern ;; esac
      # shellcheck disable=SC2053
      [[ $path == $pattern ]] && return 0
    done
  done < <(grep -iE '^[[:space:]]*include[[:space:]]' -- "$main")
  return 1
}

# --- hw_sshd_config: sshd's settings, tested and in effect ------------------------------------
#   hw_sshd_config [--config FILE [--pidfile FILE]] <<'EOF' ... EOF
# The system sshd (no --config): a drop-in /etc/ssh/sshd_config.d/00-hpcwizard.conf where
# sshd_config includes that directory, named to sort before the others (sshd keeps the
# first value it reads: 50-cloud-init.conf cannot turn passwords back on), else a block at
# the top of sshd_config. A user's own sshd: FILE, owned whole (0600).
# Then: `sshd -t` must pass, `sshd -T` must show every setting as written (else the step
# fails, naming the file that sets it otherwise), and a running sshd reloads.
HW_SSHD_DROPIN=/etc/ssh/sshd_config.d/00-hpcwizard.conf

hw_sshd_config() (
  local sshd_file='' sshd_pidfile=''
  while [ $# -gt 0 ]; do
    case $1 in
      --config) sshd_file=$2; shift 2 ;;
      --pidfile) sshd_pidfile=$2; shift 2 ;;
      *) _hw_die "hw_sshd_config: unknown option $1" ;;
    esac
  done
  if [ -z "$sshd_file" ]; then
    hw_dropin "$HW_SSHD_DROPIN" --else-block /etc/ssh/sshd_config --mode 0644 \
      --validate 'install -d -m 0755 /run/sshd && /usr/sbin/sshd -t' \
      --in-effect '/usr/sbin/sshd -T' --on-change hw_sshd_reload
  else
    hw_file "$sshd_file" --mode 0600 --validate "/usr/sbin/sshd -t -f $(printf '%q' "$sshd_file")" \
      --in-effect "/usr/sbin/sshd -T -f $(printf '%q' "$sshd_file")" \
      --on-change "hw_sshd_reload --config $(printf '%q' "$sshd_file") --pidfile $(printf '%q' "${sshd_pidfile:-$HOME/.ssh/sshd.pid}")"
  fi
)

# --- hw_ssh_key, hw_ssh_host_keys: keys, never overwritten -----------------------------------
#   hw_ssh_key PATH [--comment TEXT]   an ed25519 key pair at PATH (and PATH.pub)
# check: PATH is there. run: makes the pair when PATH is not there; an existing key is
# never touched. undo: removes the pair only if this operation made it and it is still that
# key (and the directory, if it made that and it is empty).
#   hw_ssh_host_keys                   the system's host keys (ssh-keygen -A)
# check: an ed25519 host key is there. run: removes the temporary files a killed
# ssh-keygen -A leaves, then makes the missing keys. undo: keeps them, and says so: they are
# this host's identity, which peers may have pinned.

hw_ssh_key() (
  _hw_start "$1" < /dev/null; shift
  local comment='' dir made
  while [ $# -gt 0 ]; do
    case $1 in
      --comment) comment=$2; shift 2 ;;
      *) _hw_die "hw_ssh_key: unknown option $1" ;;
    esac
  done
  dir=$(dirname -- "$real")
  case $mode in
    check) [ -s "$real" ] ;;
    diff) [ -s "$real" ] || echo "new key pair $path, $path.pub" ;;
    run)
      [ ! -s "$real" ] || exit 0
      made=0
      if [ ! -d "$dir" ]; then install -d -m 0700 -- "$dir"; made=1; fi
      rm -f -- "$real" "$real.pub"  # empty leftovers of a killed ssh-keygen
      ssh-keygen -q -t ed25519 -N '' -C "$comment" -f "$real"
      _hw_write_state "$key.ours" "$(_hw_sum "$real.pub")"
      [ "$made" = 0 ] || : > "$key.dir"
      _hw_write_state "$key.path" "$real" ;;
    undo)
      if [ ! -e "$key.ours" ]; then :
      elif [ -e "$real.pub" ] && [ "$(_hw_sum "$real.pub")" = "$(cat -- "$key.ours")" ]; then
        rm -f -- "$real" "$real.pub"
        if [ -e "$key.dir" ]; then rmdir --ignore-fail-on-non-empty -- "$dir"; fi
      elif [ -e "$real" ]; then
        _hw_say "$path is not the key hpcwizard made (it was replaced): kept"
      fi
      rm -f -- "$key".*
      _hw_tidy ;;
  esac
)

hw_ssh_host_keys() (
  case ${HW_MODE:-run} in
    check) test -s /etc/ssh/ssh_host_ed25519_key ;;
    diff) test -s /etc/ssh/ssh_host_ed25519_key || echo "new host keys in /etc/ssh (ssh-keygen -A)" ;;
    run)
      rm -f /etc/ssh/ssh_host_*_key.??????????
      ssh-keygen -A ;;
    undo) echo "hpcwizard: the host keys in /etc/ssh are kept: they are this host's identity, which peers may have pinned" ;;
    *) _hw_die "HW_MODE=${HW_MODE:-}: use check, run, undo or diff" ;;
  esac
)

# --- hw_packages: one transaction of the package manager --------------------------------------
#   hw_packages apt|dnf|yum [--lock-timeout SECONDS] NAME...
# A NAME may be alternatives, Debian's way: a|b|c is satisfied when any of them is installed
# or provided, and when none is, the first is installed (Debian 13's sysusers: apt would
# pick systemd for openssh-server, replacing the standalone one a container wants).
# check: every NAME is installed, or provided by an installed package, and (apt) dpkg has
#        nothing half done.
# run:   (apt) an install a killed run left half done is finished; one update, which fails
#        when no mirror answered; then one install, which never removes a package (a
#        transaction that needs a removal fails, naming it). What that transaction newly installed is
#        written down from what the package manager reports before and after it: KEY.new
#        (packages that were not there at all) and KEY.configs (removed but not purged
#        before: their configuration was there). A list a killed run left is finished by the
#        next run or undo, counting only the NAMEs and what they depend on.
# undo:  purges exactly KEY.new, less what another installed package still needs (kept,
#        and the output says which and for whom) and less what would make apt install
#        another package in their place; KEY.configs go back to removed, with their
#        configuration. A configuration file of a purged package changed since it was
#        installed (a dpkg conffile, or one ucf keeps) is kept first as PATH.hpcwizard-kept.
#        A failed or satisfied install purges nothing.

hw_packages() (
  _hw_pkg_start "$@"
  case $mode in
    check) _hw_pkg_installed ;;
    diff) _hw_pkg_installed || printf 'install with %s: %s\n' "$pm" "${names[*]}" ;;
    run) _hw_pkg_run ;;
    undo) _hw_pkg_undo; _hw_tidy ;;
  esac
)

_hw_pkg_start() {  # sets pm timeout names mode state key work
  pm=$1 timeout=120 names=()
  shift
  case $pm in apt|dnf|yum) ;; *) _hw_die "hw_packages: unknown package manager $pm" ;; esac
  while [ $# -gt 0 ]; do
    case $1 in
      --lock-timeout) timeout=$2; shift 2 ;;
      -*) _hw_die "hw_packages: unknown option $1" ;;
      *) names+=("$1"); shift ;;
    esac
  done
  mode=${HW_MODE:-run}
  case $mode in check|run|undo|diff) ;; *) _hw_die "HW_MODE=$mode: use check, run, undo or diff" ;; esac
  state=$(_hw_state_dir)
  _hw_hash key "$(printf '%s ' "$pm" "${names[@]}")" 12
  key=$state/packages-$key
  _hw_work
  export DEBIAN_FRONTEND=noninteractive
}

# "STATE NAME" for every package the package manager knows here (apt: dpkg's two-letter
# state, ii installed, rc configuration only; rpm: ii for every installed one).
_hw_pkg_states() {
  if [ "$pm" = apt ]; then
    dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '{print substr($1, 1, 2), $2}' | sort -u -k2
  else
    rpm -qa --qf 'ii %{NAME}\n' | sort -u -k2
  fi
}

# Every alternative of every NAME, one a line: the roots of what the transaction gave.
_hw_pkg_roots() { printf '%s\n' "${names[@]}" | tr '|' '\n' | sed '/^$/d' | sort -u; }

# The NAMEs none of whose alternatives is installed or provided by an installed package (a
# virtual name, as Debian 13's dnsutils), one a line.
_hw_pkg_missing() {
  local n a ok alts=()
  if [ "$pm" = apt ]; then
    dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Provides}\n' 2>/dev/null \
      | awk -F '\t' -v names="${names[*]}" '
          $1 ~ /^ii/ { have[$2] = 1; k = split($3, p, /,/)
                       for (i = 1; i <= k; i++) { x = p[i]; sub(/^[ \t]+/, "", x); sub(/[ (:].*/, "", x); if (x != "") have[x] = 1 } }
          END { n = split(names, want, " ")
                for (i = 1; i <= n; i++) { k = split(want[i], alt, "|"); ok = 0
                  for (j = 1; j <= k; j++) if (alt[j] in have) ok = 1
                  if (!ok) print want[i] } }'
  else
    for n in "${names[@]}"; do
      ok=0
      IFS='|' read -ra alts <<< "$n"
      for a in "${alts[@]}"; do if rpm -q --whatprovides "$a" > /dev/null 2>&1; then ok=1; break; fi; done
      [ "$ok" = 1 ] || printf '%s\n' "$n"
    done
  fi
}

_hw_pkg_installed() {
  [ -z "$(_hw_pkg_missing)" ] || return 1
  if [ "$pm" = apt ]; then [ -z "$(dpkg --audit 2>/dev/null)" ]; fi
}

# What the install asks for: a plain NAME as it is; alternatives only when none of them is
# there, and then the first.
_hw_pkg_asked() {
  local n missing
  missing=$(_hw_pkg_missing)
  for n in "${names[@]}"; do
    if [ "$n" = "${n%%|*}" ]; then printf '%s\n' "$n"
    elif grep -qxF -- "$n" <<< "$missing"; then printf '%s\n' "${n%%|*}"; fi
  done
}

# An install a stopped run left half done is finished (dpkg --configure -a). While another
# apt or dpkg runs, what it has in flight looks half done too, and dpkg has no lock
# timeout of its own: wait for that one (at most the lock timeout), as apt-get does.
_hw_dpkg_finish() {
  local i err=$work/dpkg-configure.err
  for ((i = 0; i <= timeout; i++)); do
    [ -n "$(dpkg --audit 2>/dev/null)" ] || return 0
    [ "$i" -gt 0 ] || echo "hpcwizard: finishing an install a stopped run left half done (dpkg --configure -a)"
    if dpkg --configure -a 2> "$err"; then return 0; fi
    grep -qE 'lock-frontend|dpkg/lock|frontend lock' "$err" || { cat -- "$err" >&2; return 1; }
    sleep 1
  done
  cat -- "$err" >&2
  return 1
}

_hw_pkg_run() {
  local lock=(-o "DPkg::Lock::Timeout=$timeout")
  if [ "$pm" = apt ]; then
    _hw_dpkg_finish
    # apt-get update exits 0 when no mirror answers (before apt 2.1's --error-on=any)
    apt-get "${lock[@]}" update 2>&1 | tee "$work/update"
    grep -qE '^(Hit|Get):' "$work/update" || _hw_die "apt-get update could not reach any package mirror"
  fi
  install -d -m 0700 -- "$state"  # only now: a failed update has changed nothing
  if [ ! -e "$key.before" ]; then
    _hw_pkg_states > "$key.before.tmp" && mv -f -- "$key.before.tmp" "$key.before"
  fi
  local asked=()
  mapfile -t asked < <(_hw_pkg_asked)
  if [ ${#asked[@]} -eq 0 ]; then :
  elif [ "$pm" = apt ]; then
    # A package the user has is never taken to make room: apt's own --no-remove refuses
    # such a transaction, and the simulation says first what apt wanted to remove.
    local remove
    # (one apt cannot resolve fails below, in apt's own words)
    remove=$({ apt-get -s install --no-install-recommends "${asked[@]}" 2>/dev/null || true; } \
      | awk '/^Remv /{print $2}' | sort -u | tr '\n' ' ')
    if [ -n "$remove" ]; then
      _hw_pkg_settle
      _hw_die "installing ${asked[*]} would make apt remove ${remove% }, which hpcwizard does not do (it removes no package it did not install): nothing was installed; install them by hand if that is what you want"
    fi
    apt-get "${lock[@]}" install -y --no-install-recommends --no-remove "${asked[@]}"
  else
    "$pm" install -y "${asked[@]}"
  fi
  _hw_pkg_settle
}

# The NAMEs, their providers and everything installed they depend on: what this
# transaction could have installed. (A list of the state before that a killed run left may
# be older than a package someone installed by hand since; that package is not in here.)
# apt: walked on dpkg's own data, Pre-Depends and Depends, every alternative, a virtual name
# through every installed package that provides it (libltdl-dev needs automake-1.16, which
# only automake provides: apt-cache depends --recurse stops at such a name).
_hw_pkg_reach() {
  if [ "$pm" = apt ]; then
    dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Pre-Depends}, ${Depends}\t${Provides}\n' 2>/dev/null \
      | awk -F '\t' -v roots="$*" '
          function bare(x) { sub(/^[ \t]+/, "", x); sub(/[ (:].*/, "", x); return x }
          { st = substr($1, 2, 1); if (st == "n" || st == "c") next
            have[$2] = 1
            n = split($3, d, /[,|]/)
            for (i = 1; i <= n; i++) { x = bare(d[i]); if (x != "") deps[$2] = deps[$2] " " x }
            n = split($4, p, /,/)
            for (i = 1; i <= n; i++) { x = bare(p[i]); if (x != "") by[x] = by[x] " " $2 } }
          END {
            n = split(roots, queue, " ")
            for (head = 1; head <= n; head++) {
              name = queue[head]
              if (name in seen) continue
              seen[name] = 1
              print name
              if (name in have) { k = split(deps[name], next_, " "); for (j = 1; j <= k; j++) queue[++n] = next_[j] }
              if (name in by) { k = split(by[name], next_, " "); for (j = 1; j <= k; j++) queue[++n] = next_[j] }
            }
          }' | sort -u
  else
    printf '%s\n' "$@" | sort -u
    rpm -q --requires "$@" 2>/dev/null | while read -r cap _; do
      rpm -q --whatprovides --qf '%{NAME}\n' "$cap" 2>/dev/null
    done | sort -u
  fi
}

# What the transaction (or a killed one) gave: from the states before, now, and the reach.
_hw_pkg_settle() {
  local roots=()
  [ -e "$key.before" ] || return 0
  _hw_pkg_states > "$work/after"
  mapfile -t roots < <(_hw_pkg_roots)
  _hw_pkg_reach "${roots[@]}" > "$work/reach"
  awk 'FILENAME == ARGV[1] { before[$2] = substr($1, 2, 1); next }
       FILENAME == ARGV[2] { reach[$1] = 1; next }
       substr($1, 2, 1) != "n" && substr($1, 2, 1) != "c" && ($2 in reach) {
         b = ($2 in before) ? before[$2] : "n"
         if (b == "n") print "new", $2; else if (b == "c") print "configs", $2
       }' "$key.before" "$work/reach" "$work/after" > "$work/gave"
  { cat -- "$key.new" 2>/dev/null || true; awk '$1 == "new" {print $2}' "$work/gave"; } | sort -u > "$key.new.tmp"
  { cat -- "$key.configs" 2>/dev/null || true; awk '$1 == "configs" {print $2}' "$work/gave"; } | sort -u > "$key.configs.tmp"
  mv -f -- "$key.new.tmp" "$key.new"
  mv -f -- "$key.configs.tmp" "$key.configs"
  rm -f -- "$key.before"
}

_hw_pkg_undo() {
  local lock=(-o "DPkg::Lock::Timeout=$timeout") list=() extra needed=() inst=() all some
  if [ "$pm" = apt ]; then _hw_dpkg_finish; fi
  _hw_pkg_settle   # a killed run's list, finished first
  _hw_pkg_states > "$work/now"
  if [ -s "$key.new" ]; then
    mapfile -t list < <(awk 'FILENAME == ARGV[1] { if (substr($1, 2, 1) != "n" && substr($1, 2, 1) != "c") have[$2] = 1; next }
                             ($1 in have)' "$work/now" "$key.new")
  fi
  # Keep what another installed package needs: apt would take that package with ours, or
  # install another in its place (openssh-server's sysusers: systemd for
  # systemd-standalone-sysusers).
  while [ ${#list[@]} -gt 0 ]; do
    inst=()
    if [ "$pm" = apt ]; then
      apt-get -s purge "${list[@]}" 2>/dev/null > "$work/sim" || true
      awk '/^Purg /{print $2}' "$work/sim" | sort -u > "$work/would"
      mapfile -t inst < <(awk '/^Inst /{print $2}' "$work/sim" | sort -u)
    else
      rpm -e --test "${list[@]}" 2>&1 | awk '/is needed by \(installed\)/ {print $NF}' \
        | while read -r nvr; do rpm -q --qf '%{NAME}\n' "$nvr"; done | sort -u > "$work/would-extra"
      printf '%s\n' "${list[@]}" | cat - "$work/would-extra" | sort -u > "$work/would"
    fi
    printf '%s\n' "${list[@]}" | sort -u > "$work/list"
    if [ ${#inst[@]} -gt 0 ]; then
      mapfile -t needed < <(_hw_pkg_needed_by_others "$work/list")
      all="would make apt install ${inst[*]}, which hpcwizard does not do"
      some="purging it would make apt install ${inst[*]} for packages hpcwizard did not install"
    else
      mapfile -t extra < <(comm -23 "$work/would" "$work/list")
      [ ${#extra[@]} -gt 0 ] || break
      mapfile -t needed < <(_hw_pkg_reach "${extra[@]}" | comm -12 - "$work/list")
      all="would also remove ${extra[*]}, which hpcwizard did not install"
      some="${extra[*]} (not installed by hpcwizard) needs them"
    fi
    if [ ${#needed[@]} -eq 0 ]; then
      _hw_say "purging ${list[*]} $all: kept them all"
      list=()
      break
    fi
    _hw_say "kept ${needed[*]}: $some"
    mapfile -t list < <(printf '%s\n' "${list[@]}" | grep -vxF -f <(printf '%s\n' "${needed[@]}"))
  done
  if [ ${#list[@]} -gt 0 ]; then
    if [ "$pm" = apt ]; then _hw_pkg_keep_configs "${list[@]}"; apt-get "${lock[@]}" purge -y "${list[@]}"
    else rpm -e "${list[@]}"; fi
  fi
  if [ -s "$key.configs" ] && [ "$pm" = apt ]; then
    mapfile -t list < <(awk 'FILENAME == ARGV[1] { if (substr($1, 2, 1) == "i") have[$2] = 1; next } ($1 in have)' "$work/now" "$key.configs")
    # back to "removed, configuration kept", as they were
    if [ ${#list[@]} -gt 0 ]; then apt-get "${lock[@]}" remove -y "${list[@]}"; fi
  fi
  rm -f -- "$key.new" "$key.configs" "$key.before"
}

# _hw_pkg_needed_by_others LIST: the packages of LIST (sorted) that an installed
# package not in it depends on (Pre-Depends or Depends, any alternative, a virtual name
# through its providers in LIST), one a line.
_hw_pkg_needed_by_others() {
  dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Pre-Depends}, ${Depends}\t${Provides}\n' 2>/dev/null \
    | awk -F '\t' -v listfile="$1" '
        function bare(x) { sub(/^[ \t]+/, "", x); sub(/[ (:].*/, "", x); return x }
        BEGIN { while ((getline l < listfile) > 0) ours[l] = 1 }
        substr($1, 2, 1) == "i" {
          if ($2 in ours) { n = split($4, p, /,/); for (i = 1; i <= n; i++) { x = bare(p[i]); if (x != "") by[x] = by[x] " " $2 }; next }
          n = split($3, d, /[,|]/)
          for (i = 1; i <= n; i++) { x = bare(d[i]); if (x != "") want[x] = 1 } }
        END { for (x in want) { if (x in ours) print x
                                k = split(by[x], q, " "); for (j = 1; j <= k; j++) print q[j] } }' | sort -u
}

# _hw_pkg_keep_configs PKG...: before a purge, every configuration file of these packages
# that changed since dpkg (a conffile) or ucf (sshd_config) put it there is kept as
# PATH.hpcwizard-kept, as dpkg keeps a changed conffile on upgrade: a purge would delete it.
_hw_pkg_keep_configs() {
  local p f sum want kept
  for p in "$@"; do
    {
      dpkg-query -W -f='${Conffiles}\n' -- "$p" 2>/dev/null | awk 'NF >= 2 {print $2, $1}'
      if [ -r /var/lib/ucf/registry ] && [ -r /var/lib/ucf/hashfile ]; then
        awk -v p="$p" 'FILENAME == ARGV[1] { if ($1 == p) mine[$2] = 1; next }
                       ($2 in mine) {print $1, $2}' /var/lib/ucf/registry /var/lib/ucf/hashfile
      fi
    } > "$work/configs"
    while read -r want f; do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      sum=$(md5sum < "$f") && sum=${sum%% *}
      [ "$sum" != "$want" ] || continue
      _hw_kept "$f" "$f"
      _hw_say "$f (of $p) was changed after hpcwizard installed it; that version is kept in $kept"
    done < "$work/configs"
  done
}

# --- hw_sshd: an sshd serving the port --------------------------------------------------------
#   hw_sshd --port PORT [--config FILE] [--pidfile FILE] [--systemd]
# Without --config: the system sshd (/etc/ssh/sshd_config, /run/sshd.pid); with it, a
# user's own `sshd -f FILE`. --systemd: the ssh (or sshd) unit instead of a process of ours.
# check: that sshd runs and itself listens on PORT at every address sshd -T gives it
#        (IPv6 ones only where this kernel has IPv6).
# run:   starts that sshd when none runs, and waits (at most 20 s) until it listens. An sshd
#        already running keeps running: the configuration step reloads it (hw_sshd_reload).
#        A port another program holds fails the step, naming that program, pid and user.
# undo:  stops the sshd this operation started, and no other.
# A pid file is never trusted: a process is signalled only when /proc shows it is that sshd.

hw_sshd() (
  _hw_sshd_start "$@"
  local pid='' rc=0
  pid=$(_hw_sshd_pid) || rc=$?
  # a pid file naming another program: said above; it fails the change, not the undo
  [ "$rc" -le 1 ] || [ "$mode" = undo ] || exit 1
  case $mode in
    check|diff)
      if [ -n "$pid" ] && _hw_sshd_listens "$pid"; then exit 0; fi
      [ "$mode" = check ] && exit 1
      echo "start sshd on port $port" ;;
    run) _hw_sshd_run "$pid" ;;
    undo) _hw_sshd_undo "$pid"; _hw_tidy ;;
  esac
)

# hw_sshd_reload [--config FILE] [--pidfile FILE]: an sshd already running reads its
# configuration again (SIGHUP; the system sshd under systemd: systemctl reload); none
# running: nothing to do.
hw_sshd_reload() (
  _hw_sshd_start --port 0 "$@"
  local pid='' rc=0
  [ ! -d /run/systemd/system ] || _hw_sshd_unit
  if [ -z "$config" ] && [ -d /run/systemd/system ] && systemctl is-active --quiet "$unit" 2>/dev/null; then
    systemd=1
  fi
  if [ "$systemd" = 1 ]; then
    if systemctl is-active --quiet "$unit"; then systemctl reload-or-restart "$unit"; fi
    exit 0
  fi
  # none of ours runs (a pid file naming another program is the start step's to say)
  pid=$(_hw_sshd_pid 2>/dev/null) || rc=$?
  if [ "$rc" = 0 ] && [ -n "$pid" ]; then kill -HUP "$pid"; fi
)

_hw_sshd_start() {  # sets port config pidfile systemd unit mode key sshd_t
  port='' config='' pidfile=/run/sshd.pid systemd=0
  while [ $# -gt 0 ]; do
    case $1 in
      --port) port=$2; shift 2 ;;
      --config) config=$2; shift 2 ;;
      --pidfile) pidfile=$2; shift 2 ;;
      --systemd) systemd=1; shift ;;
      *) _hw_die "hw_sshd: unknown option $1" ;;
    esac
  done
  [[ $port =~ ^[0-9]+$ ]] || _hw_die "hw_sshd: --port needs a number"
  mode=${HW_MODE:-run}
  case $mode in check|run|undo|diff) ;; *) _hw_die "HW_MODE=$mode: use check, run, undo or diff" ;; esac
  sshd_t=(/usr/sbin/sshd -T)
  [ -z "$config" ] || sshd_t+=(-f "$config")
  unit=ssh
  [ "$systemd" = 0 ] || _hw_sshd_unit
  _hw_hash key "${config:-system}:$port" 12
  key=$(_hw_state_dir)/sshd-$key
}

# systemd's name for sshd's unit: Debian's ssh.service, else sshd.service (Fedora, Arch).
_hw_sshd_unit() {
  if command -v systemctl > /dev/null && ! systemctl cat ssh.service > /dev/null 2>&1; then unit=sshd; fi
}

# Is PID this user's sshd of this configuration (its -f, none for the system's), listening
# in this network namespace, and the listener itself (not a session it forked)?
# (Bash's own tests and reads where they do: this runs for every process /proc lists.)
_hw_is_sshd() {
  local pid=$1 exe args=() f=/etc/ssh/sshd_config i stat ppid pexe
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  [ "${exe##*/}" = sshd ] || return 1
  [ -O "/proc/$pid" ] || return 1
  mapfile -d '' -t args 2>/dev/null < "/proc/$pid/cmdline" || return 1
  # sshd rewrites its title ("sshd: /usr/sbin/sshd -f FILE [listener] ..."): one string
  read -ra args <<< "${args[*]}"
  for ((i = 1; i < ${#args[@]}; i++)); do
    if [ "${args[i]}" = -f ]; then f=${args[i + 1]:-}; fi
  done
  [ "$f" = "${config:-/etc/ssh/sshd_config}" ] || return 1
  # the same network namespace: the same nsfs inode behind both links
  [ "/proc/$pid/ns/net" -ef /proc/self/ns/net ] || return 1
  read -r stat 2>/dev/null < "/proc/$pid/stat" || return 1
  stat=${stat##*) }       # after the command name, which may hold spaces and ")"
  ppid=${stat#* }; ppid=${ppid%% *}
  pexe=$(readlink "/proc/${ppid:-0}/exe" 2>/dev/null) || pexe=''
  pexe=${pexe% (deleted)}
  [ "${pexe##*/}" != sshd ]
}

# The sshd of this configuration: the one the pid file names when /proc shows it is that
# sshd, else one found in /proc (a pid file is a hint, never trusted); status 1: none runs;
# 2: none runs and the pid file names another program, which is said.
_hw_sshd_pid() {
  local pid='' named='' exe prog want=${config:-/etc/ssh/sshd_config} what=sshd
  if [ "$systemd" = 1 ]; then
    pid=$(systemctl show -p MainPID --value "$unit" 2>/dev/null || true)
    if [ "${pid:-0}" != 0 ] && _hw_is_sshd "$pid"; then echo "$pid"; return 0; fi
    return 1
  fi
  if [ -f "$pidfile" ]; then
    read -r -n 20 named < "$pidfile" || true
    if [[ $named =~ ^[0-9]+$ ]] && [ -d "/proc/$named" ]; then
      if _hw_is_sshd "$named"; then echo "$named"; return 0; fi
    else
      named=''
    fi
  fi
  while read -r exe; do
    pid=${exe#/proc/}; pid=${pid%/exe}
    if _hw_is_sshd "$pid"; then echo "$pid"; return 0; fi
  done < <(find /proc -mindepth 2 -maxdepth 2 -name exe \( -lname '*/sshd' -o -lname '*/sshd (deleted)' \) 2>/dev/null)
  [ -n "$named" ] || return 1
  exe=$(readlink "/proc/$named/exe" 2>/dev/null) || exe=''
  exe=${exe% (deleted)}
  prog=${exe##*/}
  [ -n "$prog" ] || prog=$(cat "/proc/$named/comm" 2>/dev/null)
  [ "$prog" != sshd ] || what="the sshd of $want"
  _hw_say "$pidfile names pid $named (${prog:-?}, user $(stat -c %U "/proc/$named" 2>/dev/null))," \
    "which is not $what: remove the stale pid file or stop that program"
  return 2
}

# Does sshd PID itself listen on the port, at every address sshd -T gives it?
_hw_sshd_listens() {
  local addr found=0
  while read -r addr; do
    case $addr in \[*) [ -e /proc/net/if_inet6 ] || continue ;; esac
    ss -Hltnp "sport = :$port" 2>/dev/null | awk -v a="$addr" -v p="pid=$1," \
      '$4 == a && index($0, p) { f = 1 } END { exit !f }' || return 1
    found=1
  done < <("${sshd_t[@]}" 2>/dev/null | awk -v p=":$port" '$1 == "listenaddress" && substr($2, length($2) - length(p) + 1) == p { print $2 }')
  [ "$found" = 1 ]
}

_hw_port_holders() {  # who listens on the port: "ADDRESS: PROGRAM (pid N, user U)"
  local line addr prog pid
  ss -Hltnp "sport = :$port" 2>/dev/null | while read -r line; do
    addr=$(printf '%s\n' "$line" | awk '{print $4}')
    prog=$(printf '%s\n' "$line" | sed -n 's/.*users:(("\([^"]*\)".*/\1/p')
    pid=$(printf '%s\n' "$line" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
    printf '%s: %s (pid %s, user %s)\n' "$addr" "${prog:-?}" "${pid:-?}" \
      "$( [ -n "$pid" ] && stat -c %U "/proc/$pid" 2>/dev/null || echo '?')"
  done
}

_hw_sshd_run() {
  local pid=$1 i rc holders
  if [ -n "$pid" ] && _hw_sshd_listens "$pid"; then return 0; fi
  install -d -m 0700 -- "$(dirname -- "$key")"
  if [ "$systemd" = 1 ]; then
    systemctl is-active --quiet "$unit" || _hw_write_state "$key.started" systemd
    systemctl enable "$unit"
    systemctl restart "$unit"
  elif [ -z "$pid" ]; then
    _hw_write_state "$key.started" starting  # before it starts: a kill now still leaves its undo
    # shellcheck disable=SC2119  # the sshd's own configuration: no arguments
    _hw_sshd_exec
  else
    kill -HUP "$pid"  # running, but not on this port yet: it reads its configuration again
  fi
  for i in $(seq 200); do
    rc=0; pid=$(_hw_sshd_pid 2>/dev/null) || rc=$?
    if [ "$rc" = 0 ]; then
      if [ "$(cat -- "$key.started" 2>/dev/null)" = starting ]; then _hw_write_state "$key.started" "$pid"; fi
      if _hw_sshd_listens "$pid"; then return 0; fi
    fi
    [ "$i" = 200 ] || sleep 0.1
  done
  holders=$(_hw_port_holders | grep -v "(pid ${pid:-none}," || true)
  if [ -n "$holders" ]; then
    _hw_die "port $port is taken, so sshd cannot listen on it: $(printf '%s' "$holders" | tr '\n' ';' | sed 's/;$//; s/;/; /g'). Stop that program or choose another port."
  fi
  "${sshd_t[@]}" > /dev/null || true
  _hw_die "sshd did not start listening on port $port within 20 s"
}

# _hw_sshd_exec [SSHD_ARG...]: starts the sshd of $config (the system's when empty) as a
# daemon, with SSHD_ARG (the launch script's -p PORT). The one place an sshd is started:
# hw_sshd's run here, hw_rt_sshd in the launch script (which embeds this function). The
# system's needs /run/sshd and host keys: a container started from an exported image may
# have lost /run, or carry no keys (apply's host-keys step made them before).
# shellcheck disable=SC2120  # the launch script's hw_rt_sshd passes -p PORT
_hw_sshd_exec() {
  if [ -n "$config" ]; then /usr/sbin/sshd -f "$config" "$@"; return; fi
  install -d -m 0755 /run/sshd
  if ! compgen -G '/etc/ssh/ssh_host_*_key' >/dev/null; then ssh-keygen -A; fi
  /usr/sbin/sshd "$@"
}

_hw_sshd_undo() {
  local pid=$1 started i
  [ -e "$key.started" ] || return 0   # it was running before: it keeps running
  started=$(cat -- "$key.started")
  if [ "$started" = systemd ]; then
    systemctl stop "$unit" || true
  elif [ -n "$pid" ] && { [ "$pid" = "$started" ] || [ "$started" = starting ]; }; then
    kill "$pid"
    for i in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  elif [ -n "$pid" ]; then
    _hw_say "the sshd running now (pid $pid) is not the one hpcwizard started (pid $started): left running"
  fi
  rm -f -- "$key.started"
}
