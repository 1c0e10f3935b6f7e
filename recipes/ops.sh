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
# top of FILE. A symlink is followed: its target changes and the link stays a link.
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
HW_END='# END hpcwizard'

_hw_say() { printf 'hpcwizard: %s\n' "$*" >&2; }
_hw_die() { _hw_say "$*"; exit 1; }

_hw_state_dir() {
  if [ -n "${HW_STATE:-}" ]; then printf '%s\n' "$HW_STATE"
  elif [ "$(id -u)" = 0 ]; then printf '%s\n' /var/lib/hpcwizard/ops
  else printf '%s\n' "${XDG_STATE_HOME:-$HOME/.local/state}/hpcwizard/ops"; fi
}

_hw_sum() { sha256sum < "$1" | cut -d' ' -f1; }

# _hw_put SRC DEST MODE [UID GID]: SRC's bytes become DEST in one rename.
_hw_put() {
  local src=$1 dest=$2 mode=$3 tmp
  tmp=$(mktemp "$(dirname -- "$dest")/.hpcwizard.XXXXXX")
  if ! { cat -- "$src" > "$tmp" && chmod "$mode" "$tmp"; }; then
    rm -f -- "$tmp"; return 1
  fi
  if [ $# -ge 5 ]; then chown "$4:$5" "$tmp" 2>/dev/null || true; fi
  mv -f -- "$tmp" "$dest"
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
  key=$state/$(printf '%s' "$real" | sha256sum | cut -c1-16)
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf -- '$work'" EXIT
  new=$work/new
  if [ "$mode" = undo ]; then : > "$new"; else cat > "$new"; fi
  if [ "$mode" = run ] || [ "$mode" = undo ]; then
    install -d -m 0700 -- "$state"
    _hw_sweep "$real"
    rm -f -- "$key".*.tmp
  fi
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

# Someone changed what hpcwizard wrote: keep their version beside it, and say so.
_hw_keep() {  # _hw_keep SRC
  local dest=$real.hpcwizard-kept n=1
  while [ -e "$dest" ]; do dest=$real.hpcwizard-kept.$n; n=$((n + 1)); done
  cp -p -- "$1" "$dest"
  _hw_say "$path was changed after hpcwizard wrote it; that version is kept in $dest"
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
    tmp=$(mktemp "$(dirname -- "$real")/.hpcwizard.XXXXXX")
    cp -p -- "$key.prev" "$tmp" && mv -f -- "$tmp" "$real"
  elif [ -e "$key.prev-absent" ]; then
    rm -f -- "$real"
  fi
}

_hw_release() { rm -f -- "$key.prev" "$key.prev-absent" "$key.pending"; }

# After the change: --validate, then --in-effect; on failure put the previous file back.
_hw_settle() {  # _hw_settle SUM
  local out=$work/validate.out
  if [ -n "$validate" ] && ! ( eval "$validate" ) > "$out" 2>&1; then
    cat -- "$out" >&2
    _hw_put_back; _hw_release
    _hw_die "the new $path failed its test ($validate); the previous one was put back"
  fi
  if [ -n "$in_effect" ] && ! _hw_in_effect; then
    _hw_put_back; _hw_release
    exit 1
  fi
  _hw_write_state "$key.ours" "$1"
  _hw_release
}

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

_hw_options() {  # the options every operation takes; sets file_mode validate in_effect top else_block include
  file_mode=0644 validate="" in_effect="" top=0 else_block="" include=""
  while [ $# -gt 0 ]; do
    case $1 in
      --mode) file_mode=$2; shift 2 ;;
      --validate) validate=$2; shift 2 ;;
      --in-effect) in_effect=$2; shift 2 ;;
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
    undo) _hw_file_undo ;;
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
    undo) _hw_block_undo ;;
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
  [ -d "$dir" ] || install -d -m 0700 -- "$dir"
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
  if [ ! -e "$key.before" ] || [ ! -f "$real" ]; then rm -f -- "$key".*; return 0; fi
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
  else
    _hw_put_like "$rest" "$real"
  fi
  rm -f -- "$key".*
}

# --- hw_dropin: a drop-in file where the main file includes its directory, else a block -----

hw_dropin() (
  local path=$1; shift
  _hw_options "$@"
  [ -n "$else_block" ] && [ -n "$include" ] || _hw_die "hw_dropin $path: needs --else-block FILE and --include REGEX"
  local contents args=()
  contents=$(mktemp)
  # shellcheck disable=SC2064
  trap "rm -f -- '$contents'" EXIT
  if [ "${HW_MODE:-run}" != undo ]; then cat > "$contents"; fi
  [ -n "$validate" ] && args+=(--validate "$validate")
  [ -n "$in_effect" ] && args+=(--in-effect "$in_effect")
  if [ "${HW_MODE:-run}" = undo ]; then
    hw_file "$path" < /dev/null
    hw_block "$else_block" < /dev/null
  elif grep -qsE -- "$include" "$else_block"; then
    hw_file "$path" --mode "$file_mode" "${args[@]}" < "$contents"
  else
    hw_block "$else_block" --top "${args[@]}" < "$contents"
  fi
)

# --- hw_packages: one transaction of the package manager --------------------------------------
#   hw_packages apt|dnf|yum [--lock-timeout SECONDS] NAME...
# check: every NAME is installed, or provided by an installed package, and (apt) dpkg has
#        nothing half done.
# run:   (apt) an install a killed run left half done is finished; one update, which fails
#        when no mirror answered; then one install. What that transaction newly installed is
#        written down from what the package manager reports before and after it: KEY.new
#        (packages that were not there at all) and KEY.configs (removed but not purged
#        before: their configuration was there). A list a killed run left is finished by the
#        next run or undo, counting only the NAMEs and what they depend on.
# undo:  purges exactly KEY.new, less what another installed package still needs (kept,
#        and the output says which and for whom); KEY.configs go back to removed, with
#        their configuration. A failed or satisfied install purges nothing.

hw_packages() (
  _hw_pkg_start "$@"
  case $mode in
    check) _hw_pkg_installed "${names[@]}" ;;
    diff) _hw_pkg_installed "${names[@]}" || printf 'install with %s: %s\n' "$pm" "${names[*]}" ;;
    run) install -d -m 0700 -- "$state"; _hw_pkg_run ;;
    undo) _hw_pkg_undo ;;
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
  key=$state/packages-$(printf '%s ' "$pm" "${names[@]}" | sha256sum | cut -c1-12)
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf -- '$work'" EXIT
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

_hw_pkg_installed() {
  local p
  if [ "$pm" = apt ]; then
    for p in "$@"; do
      dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' && continue
      # a virtual name (Debian 13's dnsutils): an installed package that provides it
      dpkg-query -W -f='${db:Status-Abbrev} ${Provides}\n' 2>/dev/null \
        | awk -v want="$p" '$1 ~ /^ii/ { for (i = 2; i <= NF; i++) { n = $i; sub(/,$/, "", n); if (n == want) f = 1 } } END { exit !f }' \
        || return 1
    done
    [ -z "$(dpkg --audit 2>/dev/null)" ]
  else
    for p in "$@"; do rpm -q --whatprovides "$p" > /dev/null 2>&1 || return 1; done
  fi
}

_hw_pkg_run() {
  local lock=(-o "DPkg::Lock::Timeout=$timeout")
  if [ "$pm" = apt ]; then
    if [ -n "$(dpkg --audit 2>/dev/null)" ]; then
      echo "hpcwizard: finishing an install a stopped run left half done (dpkg --configure -a)"
      dpkg --configure -a
    fi
    # apt-get update exits 0 when no mirror answers (before apt 2.1's --error-on=any)
    apt-get "${lock[@]}" update 2>&1 | tee "$work/update"
    grep -qE '^(Hit|Get):' "$work/update" || _hw_die "apt-get update could not reach any package mirror"
  fi
  if [ ! -e "$key.before" ]; then
    _hw_pkg_states > "$key.before.tmp" && mv -f -- "$key.before.tmp" "$key.before"
  fi
  if [ "$pm" = apt ]; then
    apt-get "${lock[@]}" install -y --no-install-recommends "${names[@]}"
  else
    "$pm" install -y "${names[@]}"
  fi
  _hw_pkg_settle
}

# The NAMEs, their providers and everything installed they depend on: what this
# transaction could have installed. (A list of the state before that a killed run left may
# be older than a package someone installed by hand since; that package is not in here.)
_hw_pkg_reach() {
  if [ "$pm" = apt ]; then
    {
      printf '%s\n' "$@"
      dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Provides}\n' 2>/dev/null \
        | awk -v names=" $* " '$1 ~ /^ii/ { for (i = 3; i <= NF; i++) { n = $i; sub(/,$/, "", n); if (index(names, " " n " ")) print $2 } }'
    } | sort -u > "$work/roots"
    mapfile -t roots < "$work/roots"
    { apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${roots[@]}" 2>/dev/null || true; } \
      | { grep -v '^ ' || true; } | tr -d '<>' | cat - "$work/roots" | sort -u
  else
    printf '%s\n' "$@" | sort -u
    rpm -q --requires "$@" 2>/dev/null | while read -r cap _; do
      rpm -q --whatprovides --qf '%{NAME}\n' "$cap" 2>/dev/null
    done | sort -u
  fi
}

# What the transaction (or a killed one) gave: from the states before, now, and the reach.
_hw_pkg_settle() {
  [ -e "$key.before" ] || return 0
  _hw_pkg_states > "$work/after"
  _hw_pkg_reach "${names[@]}" > "$work/reach"
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
  local lock=(-o "DPkg::Lock::Timeout=$timeout") list=() extra needed=()
  if [ "$pm" = apt ] && [ -n "$(dpkg --audit 2>/dev/null)" ]; then dpkg --configure -a; fi
  _hw_pkg_settle   # a killed run's list, finished first
  _hw_pkg_states > "$work/now"
  if [ -s "$key.new" ]; then
    mapfile -t list < <(awk 'FILENAME == ARGV[1] { if (substr($1, 2, 1) != "n" && substr($1, 2, 1) != "c") have[$2] = 1; next }
                             ($1 in have)' "$work/now" "$key.new")
  fi
  # Keep what another installed package needs: apt would take that package with ours.
  while [ ${#list[@]} -gt 0 ]; do
    if [ "$pm" = apt ]; then
      apt-get -s purge "${list[@]}" 2>/dev/null | awk '/^Purg /{print $2}' | sort -u > "$work/would"
    else
      rpm -e --test "${list[@]}" 2>&1 | awk '/is needed by \(installed\)/ {print $NF}' \
        | while read -r nvr; do rpm -q --qf '%{NAME}\n' "$nvr"; done | sort -u > "$work/would-extra"
      printf '%s\n' "${list[@]}" | cat - "$work/would-extra" | sort -u > "$work/would"
    fi
    printf '%s\n' "${list[@]}" | sort -u > "$work/list"
    mapfile -t extra < <(comm -23 "$work/would" "$work/list")
    [ ${#extra[@]} -gt 0 ] || break
    mapfile -t needed < <(_hw_pkg_reach "${extra[@]}" | comm -12 - "$work/list")
    if [ ${#needed[@]} -eq 0 ]; then
      _hw_say "purging ${list[*]} would also remove ${extra[*]}, which hpcwizard did not install: kept them all"
      list=()
      break
    fi
    _hw_say "kept ${needed[*]}: ${extra[*]} (not installed by hpcwizard) needs them"
    mapfile -t list < <(printf '%s\n' "${list[@]}" | grep -vxF -f <(printf '%s\n' "${needed[@]}"))
  done
  if [ ${#list[@]} -gt 0 ]; then
    if [ "$pm" = apt ]; then apt-get "${lock[@]}" purge -y "${list[@]}"
    else rpm -e "${list[@]}"; fi
  fi
  if [ -s "$key.configs" ] && [ "$pm" = apt ]; then
    mapfile -t list < <(awk 'FILENAME == ARGV[1] { if (substr($1, 2, 1) == "i") have[$2] = 1; next } ($1 in have)' "$work/now" "$key.configs")
    # back to "removed, configuration kept", as they were
    if [ ${#list[@]} -gt 0 ]; then apt-get "${lock[@]}" remove -y "${list[@]}"; fi
  fi
  rm -f -- "$key.new" "$key.configs" "$key.before"
}
