# shellcheck shell=bash
# hpcwizard's instance runtime, written once: which hosts make up the job, which of them this
# instance is, sshd, waiting for the peers, the hostfile. The launch script embeds this file
# (wizard/launch.py) and `hpcwizard verify` runs it (wizard/runtime.py), so that verify checks
# the hosts the launch uses, in the order it uses them; the wizard's hosts field and the SSH
# client's Host patterns ask it too (wizard/runtime.py): the host grammar is written here
# only. tests/fixtures/host-inputs.toml is its table of cases.
#
#   hw_rt_discover [--hosts TEXT] [--hostfile PATH]  -> HW_RT_NAMES, HW_RT_SLOTS, HW_RT_SOURCE
#   hw_rt_rank NAME...                               -> HW_RT_RANK ("which host is this")
#   hw_rt_sshd PORT                                  an sshd listening on PORT
#   hw_rt_rest SECONDS                               a sleep without a process
#   hw_rt_wake FILE                                  a FIFO whose byte ends hw_rt_rest
#   hw_rt_wait HOST TRIES [PORT]                     the name resolves (and PORT answers)
#   hw_rt_slots SLOTS NP                             -> HW_RT_HOST_SLOTS, HW_RT_NP
#   hw_rt_write_hostfile FILE SLOTS NAME...          'NAME slots=N' lines
#   hw_rt_end_record FILE STATUS                     the first instance's record of the end
#                                                    -> HW_RT_END_TIME (the end's name)
#   hw_rt_end_tell HOST PORT STATUS TIME DIR [OPT...]  a worker's end-of-job marker, over ssh
#   hw_rt_clock VAR                                  -> VAR: microseconds
#   hw_rt_end_ask HOST PORT DIR START                -> HW_RT_END_STATUS, HW_RT_END_TIME, from
#                                                    HOST's record
#   hw_rt_mpi_daemon [PROC]                          the job's MPI daemon runs here
#   hw_rt_iface VAR VALUE                            interfaces or subnets -> HW_RT_VALUE
#   hw_rt_address VAR VALUE                          a host name or address -> HW_RT_VALUE
#   hw_rt_port VAR VALUE                             a TCP port -> HW_RT_VALUE
#   hw_rt_route_dev HOST                             -> HW_RT_DEV (the route's interface)
#   hw_rt_roce_gid HCA PORT                          -> HW_RT_GID (RoCE v2, IPv4)
#   hw_rt_cma                                        -> HW_RT_CMA (Linux CMA: yes|no|unknown)
#   hw_rt_forward_args NAMES PREFIXES MORE VERSION   -> HW_RT_FORWARD, HW_RT_PREFIX (mpirun)
#
# A function that fails returns non-zero with one line in HW_RT_ERROR, which the caller says
# (the launch script's die; Python's BadInput, in the user's language, from
# HW_RT_ERROR_ARGS); hw_rt_sshd and hw_rt_wait also log progress
# on stderr as they go. Safe under set -euo pipefail
# and set -u; a value from the user is never evaluated: numbers are matched as ASCII digits
# before any arithmetic (bash arithmetic runs the $(...) in 'a[$(id)]'), names are checked
# against RFC 1123 before they are used, and character classes are spelled out (a locale's
# [0-9] or [a-z] may take more than ASCII).
#
# The sources, the first one that names any hosts (a variable that is unset, empty or blank
# is no source; one that is set but cannot be read is an error naming it, never "no hosts"):
#   --hosts TEXT, --hostfile PATH (not both), HOSTS, HOSTFILE,
#   OMPI_MCA_orte_default_hostfile (Open MPI 4), OMPI_MCA_prte_default_hostfile and
#   PRTE_MCA_prte_default_hostfile (Open MPI 5 / PRRTE), then the job orchestrators' own
#   lists: SKYPILOT_NODE_IPS (SkyPilot), DSTACK_NODES_IPS (dstack), MLP_WORKER_ALL_HOSTS
#   (Volcengine ML platform), then the schedulers': SLURM_JOB_NODELIST, SLURM_NODELIST
#   (scontrol show hostnames when scontrol is installed), VC_<TASK>_HOSTS (Volcano, and
#   ModelArts, which runs on it),
#   MASTER_ADDR (or PET_MASTER_ADDR) with PET_NNODES, or with WORLD_SIZE divided by
#   PET_NPROC_PER_NODE (Kubeflow PyTorchJob: <job>-master-0 then <job>-worker-0..N-2;
#   TrainJob's <job>-node-0-0.<job> as any <prefix>-0 .. <prefix>-N-1, in the first label).
#   PET_NNODES without a master, and an elastic PET_NNODES MIN:MAX, are no source.
#   PAI-DLC is this last source: MASTER_ADDR <job>-master-0 and WORLD_SIZE in nodes.
# The orchestrators' lists come before Slurm's: SkyPilot and dstack can run on a Slurm
# allocation, whose node list then names the allocation, not this job's nodes; their lists
# are taken as they are (names or addresses between newlines, commas or blanks; no patterns).
# Lists (--hosts, HOSTS, each VC_<TASK>_HOSTS): items between commas or any blanks (space,
# tab, newline); an item with [...] is a Slurm list item (node[01-03,07], rack[1-2]-n[1-2]),
# one with {A..B} a range (job-{0..3}, n{08..11} keeps the zero padding). Ranges multiply,
# the first varying slowest. Decided:
#   - a range that counts down (n{3..1}, n[3-1]) is refused, naming it: it is a typo far more
#     often than a wish for the names in reverse, and Slurm refuses it too;
#   - VC_<TASK>_HOSTS takes patterns like any other list;
#   - a tab or a newline separates items like a space (a list pasted from a file);
#   - more than 4096 hosts are refused, counted from the ranges before a name is built;
#   - Volcano's tasks come in a defined order: the tasks MASTER, LAUNCHER and MPIMASTER first
#     (mpirun runs on the first host), then the others; each group by task name in byte order
#     (LAUNCHER, MASTER, MPIMASTER; A before AB before B). Node ranks follow this order.

HW_RT_MAX_HOSTS=4096
HW_RT_MAX_RANGES=16       # range groups in one item: 4096 hosts need 12 of size 2
HW_RT_MAX_TEXT=1048576    # characters of a host list (4096 long names fit)
HW_RT_MAX_SLOTS=65536     # slots= / cpu= / host:N in a hostfile
HW_RT_HOSTFILE_LIMIT=1048576
# The platforms' variables, the one list of them (VC_<TASK>_HOSTS aside): hostfiles, Slurm's
# node lists, and all the sources read and rank reads (hw_rt_answer variables prints them)
HW_RT_HOSTFILE_VARS=(HOSTFILE OMPI_MCA_orte_default_hostfile OMPI_MCA_prte_default_hostfile
                     PRTE_MCA_prte_default_hostfile)
HW_RT_SLURM_VARS=(SLURM_JOB_NODELIST SLURM_NODELIST)
# The platforms' own rank variables, each read only for the hosts its platform named
# (HW_RT_RANK_VAR, set by hw_rt_discover): SkyPilot, dstack, Volcengine ML platform,
# Volcano's index in its task (ModelArts), PAI-DLC's RANK
HW_RT_RANK_VARS=(SKYPILOT_NODE_RANK DSTACK_NODE_RANK MLP_ROLE_INDEX VC_TASK_INDEX RANK)
# shellcheck disable=SC2034  # read by hw_rt_answer; the launch script does not use it
HW_RT_PLATFORM_VARS=(HOSTS "${HW_RT_HOSTFILE_VARS[@]}" "${HW_RT_SLURM_VARS[@]}" MASTER_ADDR
                     PET_MASTER_ADDR PET_NNODES WORLD_SIZE PET_NPROC_PER_NODE NODE_RANK
                     PET_NODE_RANK SKYPILOT_NODE_IPS SKYPILOT_NUM_NODES DSTACK_NODES_IPS
                     DSTACK_NODES_NUM DSTACK_MASTER_NODE_IP DSTACK_MPI_HOSTFILE
                     MLP_WORKER_ALL_HOSTS MLP_WORKER_NUM MLP_ROLE MA_NUM_HOSTS
                     "${HW_RT_RANK_VARS[@]}")
HW_RT_NAMES=()
HW_RT_SLOTS=()
HW_RT_SOURCE=''
HW_RT_ERROR=''
HW_RT_ERROR_ARGS=()
HW_RT_ERROR_WHERE=''
HW_RT_RANK=''
HW_RT_RANK_VAR=''
_hw_rt_out=()

_HW_RT_DIGIT='[0123456789]'
_HW_RT_ALNUM='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'
_HW_RT_LONG_LABEL=$(printf '[!.]%.0s' {1..64})  # a glob: 64 characters between dots
_HW_RT_BLANKS=$' \t\n\r\f\v'

# _hw_rt_fail TEMPLATE [KEY VALUE]...: the refusal, in HW_RT_ERROR for the launch script to
# say, and as data in HW_RT_ERROR_ARGS (TEMPLATE, then KEY VALUE pairs) for a program to say
# in its user's language: TEMPLATE is Python's str.format text, {KEY} a value, {KEY!r} one
# quoted (at most 60 characters), {{ and }} braces; wizard/runtime.py lists the templates.
_hw_rt_fail() {
  local template=$1 rest=$1 out='' m key value
  local re='^([^{}]*)([{][{]|[}][}]|[{]([abcdefghijklmnopqrstuvwxyz_]+)(!r)?[}])'
  local -A values=()
  shift
  HW_RT_ERROR_ARGS=("$template") HW_RT_ERROR_WHERE=''
  while [ $# -ge 2 ]; do
    value=$2
    if [[ $template == *"{$1!r}"* && ${#value} -gt 60 ]]; then value="${value:0:60}…"; fi
    values[$1]=$2
    HW_RT_ERROR_ARGS+=("$1" "$value")
    shift 2
  done
  while [[ $rest =~ $re ]]; do
    m=${BASH_REMATCH[0]} key=${BASH_REMATCH[3]}
    out+=${BASH_REMATCH[1]}
    case ${BASH_REMATCH[2]} in
      '{{') out+='{' ;;
      '}}') out+='}' ;;
      *'!r}') out+=$(_hw_rt_q "${values[$key]-}") ;;
      *) out+=${values[$key]-} ;;
    esac
    rest=${rest:${#m}}
  done
  HW_RT_ERROR=$out$rest
  return 1
}

_hw_rt_log() {
  if declare -F log >/dev/null; then log "$*"; else printf 'hpcwizard: %s\n' "$*" >&2; fi
}

# TEXT as a refusal quotes it, on one line: at most 60 characters, control characters
# escaped, in single quotes (a pattern bomb is not printed whole).
_hw_rt_q() {
  local t=$1
  if [ "${#t}" -gt 60 ]; then t="${t:0:60}…"; fi
  t=${t//\\/\\\\}
  t=${t//$'\n'/\\n}
  t=${t//$'\t'/\\t}
  t=${t//$'\r'/\\r}
  t=${t//[[:cntrl:]]/?}
  printf "'%s'" "$t"
}

_hw_rt_strip() {  # _hw_rt_strip VAR TEXT: TEXT without surrounding blanks, into VAR
  local t=$2 lead="^[$_HW_RT_BLANKS]+" trail="[$_HW_RT_BLANKS]+\$"
  # regular expressions, not ${t##*[!...]}: bash's patterns take quadratic time on 1 MiB
  if [[ $t =~ $lead ]]; then t=${t:${#BASH_REMATCH[0]}}; fi
  if [[ $t =~ $trail ]]; then t=${t:0:${#t}-${#BASH_REMATCH[0]}}; fi
  printf -v "$1" '%s' "$t"
}

_hw_rt_blank() { [[ ${1:-} != *[!$_HW_RT_BLANKS]* ]]; }

# _hw_rt_too_many COUNT VAR: refused when COUNT names, and those before, pass the cap; VAR
# names the variable holding the item (passed by name: copying a long item for every range
# of it is quadratic).
_hw_rt_too_many() {
  if (($1 + ${#_hw_rt_out[@]} > HW_RT_MAX_HOSTS)); then
    _hw_rt_fail 'host pattern {text!r} gives more than {max} hosts' text "${!2}" max "$HW_RT_MAX_HOSTS"
    return 1
  fi
}

# _hw_rt_split VAR TEXT: TEXT's pieces between commas, into the array VAR (empty ones kept:
# 'n[1,,2]' is refused for its empty range).
_hw_rt_split() {
  local -n _hw_rt_parts=$1
  _hw_rt_parts=()
  IFS=, read -r -d '' -a _hw_rt_parts <<< "$2," || true
  unset '_hw_rt_parts[-1]'  # the here-string's newline, after the comma added
}

# _hw_rt_braces ITEM: job-{0..3}, n{08..11}, n{1..2}-{1..2} -> _hw_rt_out. Refused before a
# name is built: more than 16 ranges, a range counting down, more than 4096 names.
_hw_rt_braces() {
  local item=$1 rest=$1 m count=1 lo hi i j width v p lit
  local lits=() los=() his=() out=() next=()
  local re="[{]($_HW_RT_DIGIT+)[.][.]($_HW_RT_DIGIT+)[}]"
  while [[ $rest == *'{'* && $rest =~ $re ]]; do
    m=${BASH_REMATCH[0]}
    los+=("${BASH_REMATCH[1]}")
    his+=("${BASH_REMATCH[2]}")
    if [ "${#los[@]}" -gt "$HW_RT_MAX_RANGES" ]; then
      _hw_rt_fail 'host pattern {text!r} has more than {max} ranges' text "$item" max "$HW_RT_MAX_RANGES"
      return 1
    fi
    lit=${rest%%"$m"*}  # the match is the leftmost: the first place its text is found
    lits+=("$lit")
    rest=${rest:${#lit}+${#m}}  # not ${rest#*"$m"}: quadratic in bash
  done
  lits+=("$rest")
  for ((j = 0; j < ${#los[@]}; j++)); do
    lo=${los[j]} hi=${his[j]}
    if [ "${#lo}" -gt 18 ] || [ "${#hi}" -gt 18 ]; then _hw_rt_too_many "$((HW_RT_MAX_HOSTS + 1))" item; return 1; fi
    if ((10#$hi < 10#$lo)); then
      _hw_rt_fail 'host pattern {text!r}: the range {range} counts down' text "$item" range "{$lo..$hi}"
      return 1
    fi
    if ((10#$hi - 10#$lo + 1 > HW_RT_MAX_HOSTS)); then _hw_rt_too_many "$((HW_RT_MAX_HOSTS + 1))" item; return 1; fi
    count=$((count * (10#$hi - 10#$lo + 1)))
    _hw_rt_too_many "$count" item || return 1
  done
  out=("${lits[0]}")
  for ((j = 0; j < ${#los[@]}; j++)); do
    width=0
    if [[ ${los[j]} == 0?* ]]; then width=${#los[j]}; fi
    next=()
    for p in "${out[@]}"; do
      for ((i = 10#${los[j]}; i <= 10#${his[j]}; i++)); do
        printf -v v '%0*d' "$width" "$i"
        next+=("$p$v${lits[j + 1]}")
      done
    done
    out=("${next[@]}")
  done
  _hw_rt_out+=("${out[@]}")
}

# _hw_rt_brackets ITEM: Slurm's node[01-03,07], rack[1-2]-n[1-2] (each number as wide as the
# range's first) -> _hw_rt_out; an item without brackets is one name.
_hw_rt_brackets() {
  local item=$1 rest=$1 m count=1 size i j k r a b lit v p
  local lits=() inners=() ranges=() firsts=() lasts=() widths=() ends=() out=() next=()
  local re='\[([^][]*)\]' range_re="^($_HW_RT_DIGIT+)(-($_HW_RT_DIGIT+))?\$"
  while [[ $rest == *'['* && $rest =~ $re ]]; do
    m=${BASH_REMATCH[0]}
    inners+=("${BASH_REMATCH[1]}")
    lit=${rest%%"$m"*}  # the match is the leftmost: the first place its text is found
    lits+=("$lit")
    rest=${rest:${#lit}+${#m}}  # not ${rest#*"$m"}: quadratic in bash
    if [ "${#inners[@]}" -gt "$HW_RT_MAX_RANGES" ]; then
      _hw_rt_fail 'host pattern {text!r} has more than {max} ranges' text "$item" max "$HW_RT_MAX_RANGES"
      return 1
    fi
  done
  lits+=("$rest")
  for lit in "${lits[@]}"; do
    if [[ $lit == *[][]* ]]; then
      _hw_rt_fail 'node list item {item!r} has an unmatched bracket' item "$item"
      return 1
    fi
  done
  for ((j = 0; j < ${#inners[@]}; j++)); do
    size=0
    _hw_rt_split ranges "${inners[j]}"
    for r in "${ranges[@]}"; do
      _hw_rt_strip r "$r"
      if ! [[ $r =~ $range_re ]]; then
        _hw_rt_fail 'node list range {range!r} in {item!r} is not N or N-M' range "$r" item "$item"
        return 1
      fi
      a=${BASH_REMATCH[1]} b=${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}
      if [ "${#a}" -gt 18 ] || [ "${#b}" -gt 18 ] || ((10#$b - 10#$a + 1 > HW_RT_MAX_HOSTS)); then
        _hw_rt_fail 'node list range {range!r} gives more than {max} hosts' range "$r" max "$HW_RT_MAX_HOSTS"
        return 1
      fi
      if ((10#$b < 10#$a)); then
        _hw_rt_fail 'node list range {range!r} counts down' range "$r"
        return 1
      fi
      firsts+=("$((10#$a))") lasts+=("$((10#$b))") widths+=("${#a}")
      size=$((size + 10#$b - 10#$a + 1))
      _hw_rt_too_many "$((count * size))" item || return 1
    done
    ends+=("${#firsts[@]}")  # group j's ranges end here in firsts/lasts/widths
    count=$((count * size))
    _hw_rt_too_many "$count" item || return 1
  done
  out=("${lits[0]}")
  k=0
  for ((j = 0; j < ${#inners[@]}; j++)); do
    next=()
    for p in "${out[@]}"; do
      for ((r = k; r < ends[j]; r++)); do
        for ((i = firsts[r]; i <= lasts[r]; i++)); do
          printf -v v '%0*d' "${widths[r]}" "$i"
          next+=("$p$v${lits[j + 1]}")
        done
      done
    done
    k=${ends[j]}
    out=("${next[@]}")
  done
  _hw_rt_out+=("${out[@]}")
}

# _hw_rt_items MODE TEXT: TEXT's items (split on commas outside [...]; MODE list: blanks
# separate too, and an item without brackets may hold {A..B} ranges; MODE nodelist: Slurm's
# syntax only) -> _hw_rt_out, after those already there.
_hw_rt_items() {
  local mode=$1 text=$2 p open=0 opens='\[[^]]*$'
  local pieces=() held=()
  if [ "${#text}" -gt "$HW_RT_MAX_TEXT" ]; then
    _hw_rt_fail 'host list of {n} characters is longer than the {max} allowed' n "${#text}" max "$HW_RT_MAX_TEXT"
    return 1
  fi
  # a brace list (n{1,2}, as bash expands it) would be split at its comma into names that
  # are not valid (n{1): say what is not supported instead
  if [ "$mode" = list ] && [[ $text == *'{'* && $text =~ [{][^{}]*[,$_HW_RT_BLANKS][^{}]*[}] ]]; then
    _hw_rt_fail 'the brace list {braces} is not supported: write the names out (n1,n2), or give a range (n{{1..2}}, n[1-2]) or a bracket list (n[1,2])' braces "${BASH_REMATCH[0]}"
    return 1
  fi
  if [ "$mode" = list ]; then text=${text//[$_HW_RT_BLANKS]/,}; fi
  if [ "${#text}" -gt 65536 ] && [[ $text != *[][]* ]]; then
    # no [...] to keep an empty range in: a run of commas is one (tr: bash's own
    # substitution is quadratic on a megabyte of them)
    text=$(printf '%s' "$text" | tr -s ,)
  fi
  _hw_rt_split pieces "$text"
  for p in ${pieces[@]+"${pieces[@]}"}; do
    held+=("$p")
    # a comma is inside [...] when the last bracket before it opens one
    if [[ $p == *[][]* ]]; then if [[ $p =~ $opens ]]; then open=1; else open=0; fi; fi
    if [ "$open" = 0 ]; then _hw_rt_item "$mode" "${held[@]}" || return 1; held=(); fi
  done
  if [ "${#held[@]}" -gt 0 ]; then _hw_rt_item "$mode" "${held[@]}" || return 1; fi
}

# _hw_rt_item MODE PIECE...: the pieces, joined by commas, as one item -> _hw_rt_out.
_hw_rt_item() {
  local mode=$1 IFS=, item
  shift
  item=$*
  if [[ $item == *[$_HW_RT_BLANKS]* ]]; then _hw_rt_strip item "$item"; fi
  IFS=$' \t\n'
  if [ -z "$item" ]; then return 0; fi
  if [ "$mode" = nodelist ] || [[ $item == *[][]* ]]; then
    _hw_rt_brackets "$item"
  else
    _hw_rt_braces "$item"
  fi
}

# A refusal of SOURCE's value names SOURCE (in HW_RT_ERROR_WHERE too: '{source}: {error}').
_hw_rt_named() {
  if [[ $HW_RT_ERROR != "$1"* ]]; then HW_RT_ERROR="$1: $HW_RT_ERROR" HW_RT_ERROR_WHERE=$1; fi
  return 1
}

# RFC 1123 host names: labels of 1 to 63 letters, digits and inner hyphens, dots between,
# at most 253 characters. Globs, not a regular expression: bash compiles one at every use,
# and one with {0,61} takes half a millisecond.
_hw_rt_valid() {
  [ -n "$1" ] && [ "${#1}" -le 253 ] && [[ $1 != *[!$_HW_RT_ALNUM.-]* ]] &&
    [[ $1 != [.-]* && $1 != *[.-] && $1 != *..* && $1 != *.-* && $1 != *-.* ]] &&
    [[ $1 != *$_HW_RT_LONG_LABEL* ]]
}

# _hw_rt_checked SOURCE: _hw_rt_out as the job's hosts, each a valid name, none twice.
_hw_rt_checked() {
  local source=$1 n first
  local -A seen=()
  if [ "${#_hw_rt_out[@]}" -eq 0 ]; then _hw_rt_fail '{source} names no hosts' source "$source"; return 1; fi
  if [ "${#_hw_rt_out[@]}" -gt "$HW_RT_MAX_HOSTS" ]; then
    _hw_rt_fail '{source} names more than {max} hosts' source "$source" max "$HW_RT_MAX_HOSTS"
    return 1
  fi
  for n in "${_hw_rt_out[@]}"; do
    if ! _hw_rt_valid "$n"; then
      _hw_rt_fail "host name {value!r} is not valid: use letters, digits, '-' and '.', no spaces or other characters" value "$n"
      _hw_rt_named "$source"
      return 1
    fi
  done
  # host names do not tell case apart (DNS, /etc/hosts): node1 and NODE1 are one host
  for n in "${_hw_rt_out[@]}"; do
    first=${seen[${n,,}]:-}
    if [ "$first" = "$n" ]; then _hw_rt_fail '{source} names {host} twice' source "$source" host "$n"; return 1; fi
    if [ -n "$first" ]; then
      _hw_rt_fail '{source} names {host} twice: {first} and {host} are one host (host names do not tell case apart)' source "$source" host "$n" first "$first"
      return 1
    fi
    seen[${n,,}]=$n
  done
  HW_RT_NAMES=("${_hw_rt_out[@]}")
  HW_RT_SOURCE=$source
}

# _hw_rt_hostfile PATH WHAT SOURCE: an OpenMPI ('node1 slots=4 max_slots=8'), MPICH
# ('node1:4') or plain hostfile, '#' comments and blank lines skipped, read only when it is
# a regular file of at most 1 MiB (a FIFO would hang the read). WHAT names the file in
# refusals to read it, SOURCE the hosts and the refusals of its lines. A count that is not
# a number from 1 to 65536 is refused, naming its line: taken as 1, the job would not be
# the one the file names.
_hw_rt_hostfile() {
  local path=$1 what=$2 source=$3 kind size line number=0 name f value where n
  local fields=() counts=() slots=()
  if [ ! -e "$path" ]; then _hw_rt_fail '{what} {path} does not exist' what "$what" path "$path"; return 1; fi
  if [ ! -f "$path" ]; then
    kind='not a regular file'
    if [ -d "$path" ]; then kind='a directory'
    elif [ -p "$path" ]; then kind='a FIFO'
    elif [ -c "$path" ]; then kind='a character device'
    elif [ -b "$path" ]; then kind='a block device'
    elif [ -S "$path" ]; then kind='a socket'; fi
    _hw_rt_fail '{what} {path} is not a regular file ({kind})' what "$what" path "$path" kind "$kind"
    return 1
  fi
  if [ ! -r "$path" ]; then _hw_rt_fail '{what} {path} cannot be read: {error}' what "$what" path "$path" error 'Permission denied'; return 1; fi
  size=$(stat -L -c %s -- "$path" 2>/dev/null) || size=0
  if [ "$size" -gt "$HW_RT_HOSTFILE_LIMIT" ]; then _hw_rt_fail '{what} {path} is larger than {limit}' what "$what" path "$path" limit '1 MiB'; return 1; fi
  # bash's read drops NUL bytes, joining the names on either side into one; a read that
  # stops at a NUL (status 0) finds one, with no other program.
  if IFS= read -r -d '' _ < "$path"; then
    _hw_rt_fail '{what} {path} holds a NUL byte: a hostfile is text, one host a line' what "$what" path "$path"
    return 1
  fi
  _hw_rt_out=()
  while IFS= read -r line || [ -n "$line" ]; do
    number=$((number + 1))
    _hw_rt_strip line "${line%%#*}"
    [ -n "$line" ] || continue
    read -r -a fields <<< "$line"
    name=${fields[0]} n=1 counts=()
    if [[ $name == *:* && $name != '['* ]]; then
      counts+=("${fields[0]}" "${name#*:}")
      name=${name%%:*}
    fi
    for f in "${fields[@]:1}"; do
      case $f in
        slots=*|cpu=*) counts+=("$f" "${f#*=}") ;;
        slots|cpu) counts+=("$f" '') ;;
      esac
    done
    set -- "${counts[@]}"
    while [ $# -gt 0 ]; do
      where=$1 value=$2
      shift 2
      if ! [[ $value =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#$value < 1 || 10#$value > HW_RT_MAX_SLOTS)); then
        _hw_rt_fail 'line {line}: the count in {field!r} is not a number from 1 to {max}' line "$number" field "$where" max "$HW_RT_MAX_SLOTS"
        _hw_rt_named "$source"
        return 1
      fi
      n=$((10#$value))
    done
    _hw_rt_out+=("$name")
    slots+=("$n")
    if [ "${#_hw_rt_out[@]}" -gt "$HW_RT_MAX_HOSTS" ]; then
      _hw_rt_fail 'line {line}: more than {max} hosts' line "$number" max "$HW_RT_MAX_HOSTS"
      _hw_rt_named "$source"
      return 1
    fi
  done < "$path"
  _hw_rt_checked "$source" || return 1
  HW_RT_SLOTS=(${slots[@]+"${slots[@]}"})
}

# _hw_rt_nodelist VAR: Slurm's compressed list in $VAR, as scontrol expands it when Slurm is
# installed (its syntax may grow), else as Slurm documents it.
_hw_rt_nodelist() {
  local var=$1 text
  _hw_rt_strip text "${!var}"
  _hw_rt_out=()
  if command -v scontrol >/dev/null 2>&1; then
    mapfile -t _hw_rt_out < <(scontrol show hostnames "$text" 2>/dev/null | head -n "$((HW_RT_MAX_HOSTS + 1))")
  fi
  if [ "${#_hw_rt_out[@]}" -eq 0 ]; then _hw_rt_items nodelist "$text" || _hw_rt_named "$var" || return 1; fi
  _hw_rt_checked "$var"
}

# Volcano's VC_<TASK>_HOSTS, in the order the header states.
_hw_rt_volcano() {
  local v task first=() rest=() vars=() source=''
  local re='^VC_([ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_]+)_HOSTS$'
  for v in "${!VC_@}"; do
    if [[ $v =~ $re ]] && ! _hw_rt_blank "${!v}"; then
      task=${BASH_REMATCH[1]}
      case $task in
        MASTER|LAUNCHER|MPIMASTER) first+=("$task") ;;
        *) rest+=("$task") ;;
      esac
    fi
  done
  [ "$(( ${#first[@]} + ${#rest[@]} ))" -gt 0 ] || return 0
  mapfile -t vars < <(
    if [ "${#first[@]}" -gt 0 ]; then printf '%s\n' "${first[@]}" | LC_ALL=C sort; fi
    if [ "${#rest[@]}" -gt 0 ]; then printf '%s\n' "${rest[@]}" | LC_ALL=C sort; fi)
  _hw_rt_out=()
  for task in "${vars[@]}"; do
    v=VC_${task}_HOSTS
    source+="${source:+, }$v"
    _hw_rt_items list "${!v}" || _hw_rt_named "$v" || return 1
  done
  _hw_rt_checked "$source" || return 1
  # VC_TASK_INDEX is a pod's index in its own task: the job's rank only when there is one
  # task. ModelArts runs on Volcano: VC_WORKER_HOSTS alone, VC_TASK_INDEX and MA_NUM_HOSTS
  # (the nodes) in its training jobs.
  if [ "${#vars[@]}" -eq 1 ]; then
    _hw_rt_count MA_NUM_HOSTS || return 1
    HW_RT_RANK_VAR=VC_TASK_INDEX
  fi
}

# _hw_rt_plain VAR [ports]: the names in $VAR as they are, between newlines, commas or
# blanks, no patterns (a bracket or a brace is then no valid name) -> _hw_rt_out; ports: an
# item's ':PORT' is dropped (a name or an IPv4 address with one colon only).
_hw_rt_plain() {
  local var=$1 ports=${2:-} text=${!1} item items=() re="^([^:]+):$_HW_RT_DIGIT{1,5}\$"
  _hw_rt_out=()
  if [ "${#text}" -gt "$HW_RT_MAX_TEXT" ]; then
    _hw_rt_fail 'host list of {n} characters is longer than the {max} allowed' n "${#text}" max "$HW_RT_MAX_TEXT"
    return 1
  fi
  _hw_rt_split items "${text//[$_HW_RT_BLANKS]/,}"
  for item in ${items[@]+"${items[@]}"}; do
    [ -n "$item" ] || continue
    if [ -n "$ports" ] && [[ $item =~ $re ]]; then item=${BASH_REMATCH[1]}; fi
    _hw_rt_out+=("$item")
    if [ "${#_hw_rt_out[@]}" -gt "$HW_RT_MAX_HOSTS" ]; then break; fi  # _hw_rt_checked says it
  done
}

# _hw_rt_count VAR: the platform's count of nodes, when set, is the number of hosts found
# (a list cut short, or a count of another job, would start a job that waits for ever).
_hw_rt_count() {
  local value
  _hw_rt_strip value "${!1:-}"
  [ -n "$value" ] || return 0
  if ! [[ $value =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#$value != ${#HW_RT_NAMES[@]})); then
    _hw_rt_fail '{var}={value!r}, but {source} names {n} hosts' var "$1" value "$value" source "$HW_RT_SOURCE" n "${#HW_RT_NAMES[@]}"
    return 1
  fi
}

# _hw_rt_list VAR COUNT RANK [ports]: the hosts $VAR lists, checked against $COUNT; RANK is
# the variable that says which of them this instance is.
_hw_rt_list() {
  _hw_rt_plain "$1" "${4:-}" || _hw_rt_named "$1" || return 1
  _hw_rt_checked "$1" || return 1
  _hw_rt_count "$2" || return 1
  HW_RT_RANK_VAR=$3
}

# The job orchestrators' lists, each with its count and rank variable.
#   SkyPilot (docs.skypilot.co, running-jobs/environment-variables.html): SKYPILOT_NODE_IPS,
#     the nodes' IPs one a line, the head node first; SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES.
#   dstack (runner/internal/runner/executor/executor.go, execJob and writeMpiHostfile):
#     DSTACK_NODES_IPS, job IPs one a line; DSTACK_MASTER_NODE_IP, the first of them (the
#     server's master_job_ip is job_ips[0]); DSTACK_NODE_RANK, DSTACK_NODES_NUM;
#     DSTACK_MPI_HOSTFILE, 'IP slots=GPUs' (or 'IP' on a CPU node) for the same IPs in the
#     same order, written empty when no IP is known: read for its slots when not empty.
#   Volcengine ML platform (volcengine.com/docs/6459/75329, 通用环境变量列表):
#     MLP_WORKER_ALL_HOSTS, the workers' addresses between commas (ports are separate,
#     MLP_WORKER_<i>_PORT; a 'host:port' item is taken as its host), MLP_WORKER_NUM, and
#     MLP_ROLE_INDEX, the index within MLP_ROLE: a rank of the workers only when MLP_ROLE
#     is WORKER (or not set).
_hw_rt_orchestrators() {
  local names=() value file rank=MLP_ROLE_INDEX
  if ! _hw_rt_blank "${SKYPILOT_NODE_IPS:-}"; then
    _hw_rt_list SKYPILOT_NODE_IPS SKYPILOT_NUM_NODES SKYPILOT_NODE_RANK
    return
  fi
  if ! _hw_rt_blank "${DSTACK_NODES_IPS:-}"; then
    _hw_rt_list DSTACK_NODES_IPS DSTACK_NODES_NUM DSTACK_NODE_RANK || return 1
    _hw_rt_strip value "${DSTACK_MASTER_NODE_IP:-}"
    if [ -n "$value" ] && [ "$value" != "${HW_RT_NAMES[0]}" ]; then
      _hw_rt_fail '{var}={value!r} is not the first host of {source} ({first})' var DSTACK_MASTER_NODE_IP value "$value" source DSTACK_NODES_IPS first "${HW_RT_NAMES[0]}"
      return 1
    fi
    _hw_rt_strip file "${DSTACK_MPI_HOSTFILE:-}"
    if [ -n "$file" ] && [ -s "$file" ]; then
      names=("${HW_RT_NAMES[@]}")
      _hw_rt_hostfile "$file" DSTACK_MPI_HOSTFILE "DSTACK_MPI_HOSTFILE=$file" || return 1
      if [ "${names[*]}" != "${HW_RT_NAMES[*]}" ]; then
        _hw_rt_fail '{file} names other hosts than {source}, or in another order' file "DSTACK_MPI_HOSTFILE=$file" source DSTACK_NODES_IPS
        return 1
      fi
      HW_RT_SOURCE='DSTACK_NODES_IPS (slots from DSTACK_MPI_HOSTFILE)'
    fi
    return 0
  fi
  if ! _hw_rt_blank "${MLP_WORKER_ALL_HOSTS:-}"; then
    _hw_rt_strip value "${MLP_ROLE:-}"
    if [ -n "$value" ] && [ "$value" != WORKER ]; then rank=''; fi
    _hw_rt_list MLP_WORKER_ALL_HOSTS MLP_WORKER_NUM "$rank" ports
  fi
}

# A master's name with a count of nodes: the job's hosts when the name says the others'.
# Kubeflow's PyTorchJob (training-operator v1.9, pkg/controller.v1/pytorch/envvar.go and
# master.go) sets MASTER_ADDR and PET_MASTER_ADDR to <job>-master-0, PET_NNODES to the
# replicas and WORLD_SIZE to replicas x nprocPerNode: processes, not nodes (a nprocPerNode
# that is no number, such as its default auto, counts 1). TrainJob (kubeflow/trainer v2,
# pkg/runtime/framework/plugins/torch/torch.go) sets only the PET_ ones, its master
# <job>-node-0-0.<job>. So the master is MASTER_ADDR, else PET_MASTER_ADDR; the nodes
# PET_NNODES, else WORLD_SIZE divided by PET_NPROC_PER_NODE, which the operator computed it
# with (auto, cpu, gpu and xpu count 1; an operator <= 1.6 sets WORLD_SIZE to the replicas
# and no PET_NPROC_PER_NODE). Never NPROC_PER_NODE: the launch's own setting says how many
# processes start, not how many nodes there are. No source, as before PET_NNODES was read:
# PET_NNODES without a master (v1.9 sets it on every PyTorchJob, one without a Master
# replica too) and an elastic job's MIN:MAX (its rendezvous decides the members).
_hw_rt_master_world() {
  local master size n=1 i given missing head domain per=1 value nnodes world
  local mvar=MASTER_ADDR cvar=WORLD_SIZE pvar='' source
  _hw_rt_strip master "${MASTER_ADDR:-}"
  if [ -z "$master" ]; then
    _hw_rt_strip master "${PET_MASTER_ADDR:-}"
    if [ -n "$master" ]; then mvar=PET_MASTER_ADDR; fi
  fi
  _hw_rt_strip nnodes "${PET_NNODES:-}"
  _hw_rt_strip world "${WORLD_SIZE:-}"
  if [[ $nnodes =~ ^$_HW_RT_DIGIT{1,18}:$_HW_RT_DIGIT{1,18}$ ]]; then return 0; fi
  size=$world
  if [ -n "$nnodes" ]; then cvar=PET_NNODES size=$nnodes; fi
  if [ -n "$size" ]; then
    if ! [[ $size =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#$size < 1)); then
      _hw_rt_fail '{var} {value!r} is not a positive number' var "$cvar" value "$size"
      return 1
    fi
    n=$((10#$size))
  fi
  if [ -z "$master" ] && [ -z "$world" ]; then return 0; fi
  if [ -z "$master" ] || [ -z "$size" ]; then
    if [ -n "$master" ]; then
      given=$mvar missing=WORLD_SIZE
      if [ "$mvar" = PET_MASTER_ADDR ]; then missing=PET_NNODES; fi
    else
      given=WORLD_SIZE missing=MASTER_ADDR
    fi
    _hw_rt_fail "{given} is set but {missing} is not: together they name the job's hosts; set {missing} too, or give the hosts with --hosts or HOSTS" given "$given" missing "$missing"
    return 1
  fi
  if [ "$cvar" = WORLD_SIZE ]; then
    _hw_rt_strip value "${PET_NPROC_PER_NODE:-}"
    if [ -n "$value" ]; then pvar=PET_NPROC_PER_NODE; fi
    if [ -n "$pvar" ]; then
      case $value in
        auto|cpu|gpu|xpu) ;;
        *)
          if ! [[ $value =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#$value < 1)); then
            _hw_rt_fail '{var} {value!r} is not a positive number' var "$pvar" value "$value"
            return 1
          fi
          per=$((10#$value)) ;;
      esac
    fi
  fi
  source="$mvar and $cvar${pvar:+/$pvar}"
  if ((n % per)); then
    _hw_rt_fail '{source}: WORLD_SIZE {size} is not a multiple of {var} {per}: set PET_NNODES, or give the hosts with --hosts or HOSTS' source "$source" size "$n" var "$pvar" per "$per"
    return 1
  fi
  n=$((n / per))
  if [ "$n" -gt "$HW_RT_MAX_HOSTS" ]; then
    _hw_rt_fail '{source}: {var} {n} is more than {max} hosts' source "$source" var "$cvar${pvar:+/$pvar}" n "$n" max "$HW_RT_MAX_HOSTS"
    return 1
  fi
  _hw_rt_out=("$master")
  _hw_rt_checked "$mvar" || return 1
  _hw_rt_out=()
  # the first label only: a domain such as ns-master-0.svc or exp-0 is not the job's name
  if [[ $master =~ ^([^.]*)-master-0([.].*)?$ ]]; then
    head=${BASH_REMATCH[1]} domain=${BASH_REMATCH[2]}
    _hw_rt_out=("$master")
    for ((i = 0; i < n - 1; i++)); do _hw_rt_out+=("$head-worker-$i$domain"); done
    source+=' (Kubeflow naming <job>-master-0, <job>-worker-i)'
  elif [[ $master =~ ^([^.]*-)0([.].*)?$ ]]; then
    head=${BASH_REMATCH[1]} domain=${BASH_REMATCH[2]}
    for ((i = 0; i < n; i++)); do _hw_rt_out+=("$head$i$domain"); done
    source+=' (naming <prefix>-0 .. <prefix>-N-1)'
  elif [ "$n" -eq 1 ]; then
    _hw_rt_out=("$master")
  else
    _hw_rt_fail '{source}: cannot tell the other {n} host names from {var} {master!r}; give them with --hosts or HOSTS' source "$source" n "$((n - 1))" var "$mvar" master "$master"
    return 1
  fi
  _hw_rt_checked "$source" || return 1
  # RANK is a node's index where WORLD_SIZE counts nodes (PAI-DLC: 0 on the master, i+1 on
  # worker i; a PyTorchJob of operator <= 1.6 alike). Where WORLD_SIZE counts processes
  # (PET_NPROC_PER_NODE), or in a process torchrun started (LOCAL_RANK is set), RANK is a
  # process's: never read.
  if [ "$cvar" = WORLD_SIZE ] && [ -z "$pvar" ] && [ -z "${LOCAL_RANK:-}" ]; then
    HW_RT_RANK_VAR=RANK
  fi
}

# hw_rt_discover [--hosts TEXT [--label NAME]] [--hostfile PATH]: the job's hosts from the
# first source that names any -> HW_RT_NAMES (in order), HW_RT_SLOTS (per host, when a
# hostfile said; else empty), HW_RT_SOURCE (where, in words: NAME for TEXT, --hosts unless
# told, as the wizard's field is "hosts"). None at all: status 0 and no names.
hw_rt_discover() {
  local hosts='' hostfile='' has_hosts=0 has_hostfile=0 v value label=--hosts
  HW_RT_NAMES=() HW_RT_SLOTS=() HW_RT_SOURCE='' HW_RT_ERROR='' HW_RT_RANK_VAR='' _hw_rt_out=()
  while [ $# -gt 0 ]; do
    case $1 in
      --hosts) [ $# -ge 2 ] || { _hw_rt_fail '{option} needs a value' option --hosts; return 1; }
               hosts=$2 has_hosts=1; shift 2 ;;
      --hostfile) [ $# -ge 2 ] || { _hw_rt_fail '{option} needs a value' option --hostfile; return 1; }
                  hostfile=$2 has_hostfile=1; shift 2 ;;
      --label) [ $# -ge 2 ] || { _hw_rt_fail '{option} needs a value' option --label; return 1; }
               label=$2; shift 2 ;;
      *) _hw_rt_fail 'hw_rt_discover: unknown option {option}' option "$1"; return 1 ;;
    esac
  done
  if [ "$has_hosts" = 1 ] && [ "$has_hostfile" = 1 ]; then
    _hw_rt_fail "give --hosts or --hostfile, not both"
    return 1
  fi
  if [ "$has_hosts" = 1 ]; then
    _hw_rt_items list "$hosts" || _hw_rt_named "$label" || return 1
    _hw_rt_checked "$label"
    return
  fi
  if [ "$has_hostfile" = 1 ]; then
    _hw_rt_hostfile "$hostfile" --hostfile "--hostfile $hostfile"
    return
  fi
  if ! _hw_rt_blank "${HOSTS:-}"; then
    _hw_rt_items list "$HOSTS" || _hw_rt_named HOSTS || return 1
    _hw_rt_checked HOSTS
    return
  fi
  # Open MPI 4's orte_default_hostfile (orte/runtime/orte_mca_params.c), Open MPI 5's
  # prte_default_hostfile (PRRTE 3.0 src/runtime/prte_mca_params.c), as each reads it
  for v in "${HW_RT_HOSTFILE_VARS[@]}"; do
    if ! _hw_rt_blank "${!v:-}"; then
      _hw_rt_strip value "${!v}"
      _hw_rt_hostfile "$value" "$v" "$v=$value"
      return
    fi
  done
  _hw_rt_orchestrators || return 1
  [ "${#HW_RT_NAMES[@]}" -eq 0 ] || return 0
  for v in "${HW_RT_SLURM_VARS[@]}"; do
    if ! _hw_rt_blank "${!v:-}"; then _hw_rt_nodelist "$v"; return; fi
  done
  _hw_rt_volcano || return 1
  [ "${#HW_RT_NAMES[@]}" -eq 0 ] || return 0
  _hw_rt_master_world
}

# hw_rt_rank NAME...: which of the names is this instance -> HW_RT_RANK: NODE_RANK when set,
# else PET_NODE_RANK (Kubeflow's; TrainJob sets no NODE_RANK), else HW_RT_RANK_VAR (the
# rank variable of the platform whose list hw_rt_discover read: SKYPILOT_NODE_RANK, ...),
# else the name that is this host's name (hostname, -s, -f; a name's short form counts),
# else the first whose address (_hw_rt_lookup) is one of this host's. Status 1: none of
# them; 2: the rank variable is not one of the ranks.
hw_rt_rank() {
  local n=$# i name mine addrs a var=NODE_RANK
  local names=("$@")
  HW_RT_RANK='' HW_RT_ERROR=''
  if [ -z "${NODE_RANK:-}" ] && [ -n "${PET_NODE_RANK:-}" ]; then var=PET_NODE_RANK; fi
  if [ -z "${!var:-}" ] && [ -n "$HW_RT_RANK_VAR" ] && [ -n "${!HW_RT_RANK_VAR:-}" ]; then
    var=$HW_RT_RANK_VAR
  fi
  if [ -n "${!var:-}" ]; then
    if ! [[ ${!var} =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#${!var} >= n)); then
      _hw_rt_fail '{var}={value!r} is not 0..{last}' var "$var" value "${!var}" last "$((n - 1))"
      return 2
    fi
    HW_RT_RANK=$((10#${!var}))
    return 0
  fi
  mine=" $(hostname 2>/dev/null || true) $(hostname -s 2>/dev/null || true) $(hostname -f 2>/dev/null || true) "
  for ((i = 0; i < n; i++)); do
    name=${names[i]}
    if [[ $mine == *" $name "* || $mine == *" ${name%%.*} "* ]]; then HW_RT_RANK=$i; return 0; fi
  done
  addrs=" $(hostname -I 2>/dev/null || ip -o addr show 2>/dev/null | awk '{split($4, a, "/"); printf "%s ", a[1]}') "
  for ((i = 0; i < n; i++)); do
    a=$(_hw_rt_lookup "${names[i]}") || a=''
    if [ -n "$a" ] && [[ $addrs == *" $a "* ]]; then HW_RT_RANK=$i; return 0; fi
  done
  _hw_rt_fail 'this instance ({host}) is none of the hosts{source}; set NODE_RANK' host "$(hostname 2>/dev/null || echo '?')" source "${HW_RT_SOURCE:+ from $HW_RT_SOURCE}"
  return 1
}

# _hw_rt_lookup NAME: NAME's address. An IPv4 address is its own: getent hosts looks one up
# in reverse, and fails where nothing names it, as for the platforms' IP lists.
_hw_rt_lookup() {
  if [[ $1 =~ ^$_HW_RT_DIGIT{1,3}([.]$_HW_RT_DIGIT{1,3}){3}$ ]]; then printf '%s\n' "$1"; return 0; fi
  getent hosts "$1" 2>/dev/null | awk '{print $1; exit}'
}

# shellcheck disable=SC2016  # $1 and $2 are the inner bash's arguments: never its source
_hw_rt_port_open() { timeout 2 bash -c ': </dev/tcp/"$1"/"$2"' _ "$1" "$2" 2>/dev/null; }

# _hw_rt_greeting HOST PORT: the first line the server on PORT sends unasked (an SSH
# server's: SSH-2.0-..., at most 255 bytes by RFC 4253), only its letters, digits, blanks
# and .,:;_+~()@=- kept; nothing when the port is closed or the server says nothing.
# shellcheck disable=SC2016  # as above
_hw_rt_greeting() {
  local line
  line=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" && IFS= read -r -n 255 -t 2 line <&3 && printf "%s" "$line"' \
    _ "$1" "$2" 2>/dev/null) || return 0
  printf '%s\n' "${line//[!$_HW_RT_ALNUM .,:;_+~()@=-]/}"
}

# hw_rt_sshd PORT: an sshd listening on PORT; one already listening is used as it is, never
# signalled. As root the system's, else the user's own: sshd -f ~/.sshd_config (written by
# 'hpcwizard apply' as that user). ops.sh's _hw_sshd_exec starts it, as apply's hw_sshd
# does; _hw_say, _hw_is_sshd and _hw_sshd_pid find one running (the launch script embeds
# the four).
hw_rt_sshd() {
  local port=$1 i pid pidfile=/run/sshd.pid config='' systemd=0 unit=ssh greeting
  if [ "$(id -u)" -ne 0 ]; then
    # the pid file the user's sshd configuration names: apply writes ~/.ssh/sshd.pid, or
    # ~/.hpcwizard-sshd/sshd.pid beside a ~/.ssh the platform provides
    config=$HOME/.sshd_config
    pidfile=$(awk '$1 == "PidFile" {print $2; exit}' "$config" 2>/dev/null) || true
    pidfile=${pidfile:-$HOME/.ssh/sshd.pid}
  fi
  : "$config" "$systemd" "$unit"  # read by _hw_sshd_pid and _hw_sshd_exec
  # An SSH server's greeting says enough: finding its pid reads every process in /proc, a
  # tenth of a second of CPU on a busy node, paid by every instance as the job starts.
  greeting=$(_hw_rt_greeting 127.0.0.1 "$port")
  if [[ $greeting == SSH-* ]]; then
    _hw_rt_log "an SSH server already listens on port $port: $greeting"
    return 0
  fi
  if _hw_rt_port_open 127.0.0.1 "$port"; then
    if pid=$(_hw_sshd_pid 2>&1); then
      _hw_rt_log "sshd (pid $pid) already listens on port $port"
    else
      pid=${pid#hpcwizard: }
      _hw_rt_log "port $port already answers; ${pid:-$pidfile names no running sshd}"
    fi
    return 0
  fi
  if [ -z "$config" ]; then
    _hw_sshd_exec -p "$port"  # the system's: on PORT, whatever the image's configuration says
  elif [ ! -r "$config" ]; then
    _hw_rt_fail "no {config}: run 'hpcwizard apply' as {user} first" config "$config" user "$(id -un)"
    return 1
  else
    _hw_sshd_exec
  fi
  for ((i = 0; i < 50; i++)); do
    if _hw_rt_port_open 127.0.0.1 "$port"; then _hw_rt_log "started sshd on port $port"; return 0; fi
    sleep 0.1
  done
  _hw_rt_fail 'sshd did not start listening on port {port}' port "$port"
}

# hw_rt_rest SECONDS: a sleep that starts no process (read's time-out on a pipe nobody
# writes to). A worker rests once a second for the whole job; with many instances on one
# machine, a sleep and a cat a second each added up to most of a core.
# shellcheck disable=SC2317,SC2329  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_rest() {
  if [ -z "${_HW_RT_REST_FD:-}" ]; then exec {_HW_RT_REST_FD}<> <(:); fi
  read -r -t "$1" -u "$_HW_RT_REST_FD" _ || true
}

# hw_rt_wake FILE: a FIFO made anew at FILE, on which hw_rt_rest then rests: a line written
# to it (hw_rt_end_tell's, after the marker) ends the rest at once. Status 1: no FIFO (a
# file system without them); hw_rt_rest then rests its whole time.
# shellcheck disable=SC2317,SC2329  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_wake() {
  rm -f "$1" && mkfifo -m 600 "$1" 2>/dev/null || return 1
  exec {_HW_RT_REST_FD}<>"$1"  # read and write: never blocks, never sees an end of file
}

# hw_rt_wait HOST TRIES [PORT]: bounded retries with backoff (1, 2, 4, 8, 16, 16... seconds)
# until HOST's name resolves and, given PORT, the port answers.
_HW_RT_MAX_DELAY=16
hw_rt_wait() {
  local h=$1 tries=$2 port=${3:-} try=1 delay=1 what
  while :; do
    # a port that answers needs no look-up of its name (the connection made one)
    if [ -n "$port" ] && _hw_rt_port_open "$h" "$port"; then return 0; fi
    if [ -z "$(_hw_rt_lookup "$h")" ]; then
      what="name"
    elif [ -z "$port" ]; then
      return 0
    else
      what="port $port"
    fi
    if [ "$try" -ge "$tries" ]; then
      _hw_rt_log "$h: $what not ready after $try tries"
      if [ "$what" = name ]; then
        # the job's names are the user's to make resolve: say how, not only that it failed
        _hw_rt_fail "{host}: the name does not resolve after {tries} tries; the instances must resolve each other's names (the platform's DNS or /etc/hosts), or use the IPs the platform lists (HOSTS=10.0.0.1,10.0.0.2)" host "$h" tries "$try"
      else
        _hw_rt_fail '{host}: {what} not ready after {tries} tries' host "$h" what "$what" tries "$try"
      fi
      return 1
    fi
    _hw_rt_log "waiting for $h ($what), try $try of $tries, next in ${delay}s"
    sleep "$delay"
    try=$((try + 1))
    delay=$((delay * 2 < _HW_RT_MAX_DELAY ? delay * 2 : _HW_RT_MAX_DELAY))
  done
}

# hw_rt_wait_seconds TRIES -> HW_RT_SECONDS: what hw_rt_wait's waits between TRIES tries
# add up to (the longest it waits, its probes aside).
# shellcheck disable=SC2317,SC2329,SC2034  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_wait_seconds() {
  local try delay=1
  HW_RT_SECONDS=0
  for ((try = 1; try < $1; try++)); do
    HW_RT_SECONDS=$((HW_RT_SECONDS + delay))
    delay=$((delay * 2 < _HW_RT_MAX_DELAY ? delay * 2 : _HW_RT_MAX_DELAY))
  done
}

# hw_rt_slots SLOTS NP: the ranks of the job on HW_RT_NAMES (after hw_rt_discover) ->
# HW_RT_HOST_SLOTS (per host, in order) and HW_RT_NP (in all). SLOTS, when not empty, is
# every host's; else a hostfile's counts are honoured (the user's 'node1 slots=4' means 4
# ranks there, as mpirun reads it); else 1. NP, when not empty, is the total; else the sum.
# Each must be a whole number from 1 (0 ranks is no job; mpirun -np 0 runs one per slot).
# shellcheck disable=SC2317,SC2329,SC2034  # the MPI launch uses it and HW_RT_NP; PyTorch's does not
hw_rt_slots() {
  local every=$1 np=$2 i total=0
  HW_RT_HOST_SLOTS=() HW_RT_NP='' HW_RT_ERROR=''
  if [ -n "$every" ]; then
    if ! [[ $every =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#$every < 1 || 10#$every > HW_RT_MAX_SLOTS)); then
      _hw_rt_fail 'SLOTS={value!r} is not a number from 1 to {max}' value "$every" max "$HW_RT_MAX_SLOTS"
      return 1
    fi
    every=$((10#$every))
  fi
  for ((i = 0; i < ${#HW_RT_NAMES[@]}; i++)); do
    HW_RT_HOST_SLOTS+=("${every:-${HW_RT_SLOTS[i]:-1}}")
    total=$((total + HW_RT_HOST_SLOTS[i]))
  done
  if [ -n "$np" ]; then
    if ! [[ $np =~ ^$_HW_RT_DIGIT{1,18}$ ]] || ((10#$np < 1 || 10#$np > HW_RT_MAX_HOSTS * HW_RT_MAX_SLOTS)); then
      _hw_rt_fail 'NP={value!r} is not a number from 1 to {max}' value "$np" max "$((HW_RT_MAX_HOSTS * HW_RT_MAX_SLOTS))"
      return 1
    fi
    total=$((10#$np))
  fi
  HW_RT_NP=$total
}

# hw_rt_write_hostfile FILE SLOTS NAME...: the hostfile mpirun reads, 'NAME slots=N' a line:
# SLOTS is one number for every host, or a comma-separated list, one for each.
hw_rt_write_hostfile() {
  local file=$1 i per=()
  shift
  IFS=, read -r -a per <<< "$1"
  shift
  for ((i = 0; i < $#; i++)); do
    printf '%s slots=%s\n' "${@:i+1:1}" "${per[i]:-${per[0]}}"
  done > "$file"
}

# The end of an MPI job, the launch script's: after mpirun the first instance keeps the job's
# status on itself (DIR/end.FIRST, hw_rt_end_record) and tells each worker
# (DIR/done.WORKER there, hw_rt_end_tell); a worker its word does not reach asks for the
# record (hw_rt_end_ask). DIR is relative to the user's home on both sides (ssh logs in
# there). A record holds 'STATUS MICROSECONDS', the time by the first instance's clock: a
# worker compares the record's age with its own wait, two durations in microseconds, so no
# two clocks are compared and an earlier run's record is never taken for this one's. Where
# a clock has only whole seconds, each side errs towards calling a record older. The
# marker holds the same two words: the record's time names this end, so that a worker
# knows an end it has already taken (a tell tried again after it arrived). A third word,
# 'launch', says the first instance's launch ended before its mpirun ran (a worker never
# ready, a refusal, a signal): the job did not run, and a waiting worker learns it by asking.

# hw_rt_end_record FILE STATUS [launch]: the record, written whole (never read half
# written); its time -> HW_RT_END_TIME, also when it could not be written.
# shellcheck disable=SC2034  # the launch script reads it
HW_RT_END_TIME=''
# shellcheck disable=SC2317,SC2329,SC2034  # the MPI launch uses both; PyTorch's and verify do not
hw_rt_end_record() {
  _hw_rt_record_time
  _hw_rt_record "$1" "$2 $HW_RT_END_TIME${3:+ $3}"
}

# hw_rt_begun_record FILE: the first instance's mark that a launch runs there (its start),
# which the launch removes once it has kept its end: a worker that asks learns whether one
# runs, with no two clocks compared.
# shellcheck disable=SC2317,SC2329  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_begun_record() {
  _hw_rt_record_time
  _hw_rt_record "$1" "$HW_RT_END_TIME"
}

_hw_rt_record_time() {  # -> HW_RT_END_TIME: microseconds of the epoch
  local t=${EPOCHREALTIME:-}
  t=${t//[!0123456789]/}  # the locale's decimal point
  if [ -z "$t" ]; then printf -v t '%(%s)T000000' -1; fi  # the start of its second: older
  HW_RT_END_TIME=$t
}

_hw_rt_record() {  # FILE TEXT: private, written whole (never read half written)
  (umask 077 && printf '%s\n' "$2" > "$1.part" && mv -f "$1.part" "$1")
}

# hw_rt_end_tell HOST PORT STATUS TIME DIR [SSH_OPTION...]: one try at HOST's marker
# DIR/done.HOST ('STATUS TIME', TIME the record's), written whole, then a line into the
# worker's FIFO DIR/wake.HOST when it has one (hw_rt_wake), opened for reading and writing
# so that it never blocks; the options reach ssh (the launch's connection sharing).
# shellcheck disable=SC2317,SC2329  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_end_tell() {
  local host=$1 port=$2 status=$3 t=$4 dir=$5
  shift 5
  # both reach the remote shell's command line: digits only
  [[ $status =~ ^[0123456789]{1,3}$ && $t =~ ^[0123456789]{0,19}$ ]] || return 2
  ssh "$@" -o BatchMode=yes -o ConnectTimeout=5 -p "$port" "$host" \
    "umask 077 && mkdir -p $dir && echo $status $t > $dir/done.$host.part && mv -f $dir/done.$host.part $dir/done.$host && { [ ! -p $dir/wake.$host ] || echo wake 1<>$dir/wake.$host || :; }" \
    </dev/null
}

# hw_rt_clock VAR: this instance's time in microseconds (bash's EPOCHREALTIME, whose point
# is the locale's; bash before 5.0: whole seconds of the shell's life, SECONDS).
hw_rt_clock() {
  local t=${EPOCHREALTIME:-$SECONDS.000000}
  printf -v "$1" '%s' "${t//[.,]/}"
}

# hw_rt_end_ask HOST PORT DIR START: HOST's record DIR/end.HOST, when HOST wrote it after
# START (hw_rt_clock, when this worker began to wait) -> HW_RT_END_STATUS, and its time by
# HOST's clock (the end's name, as in the marker) -> HW_RT_END_TIME, and what ended ->
# HW_RT_END_WHAT: 'job', or 'launch' when the job did not run. The session is
# opened first, then HOST's clock read: between the two lines of the dialogue, not the
# whole login, lies the uncertainty, so a record written a second after START is taken.
# Status 1: no record that young (the job runs, or an earlier run's), or one of a launch
# that ended before its job while another runs there now; then, when there is a record
# not taken and no launch runs on HOST (DIR/begun.HOST absent, hw_rt_begun_record), its
# status -> HW_RT_IDLE_STATUS and its age in seconds -> HW_RT_IDLE_AGE. Status 2: HOST was
# not asked (ssh failed or gave no answer within _HW_RT_ASK_SECONDS; HW_RT_ERROR says why).
_HW_RT_ASK_SECONDS=30  # the whole ask, login included; ssh still running then is ended
# shellcheck disable=SC2317,SC2329,SC2034  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_end_ask() {
  local line last='' t1='' said='' rc='' slack=0 pid rfd wfd left
  local d=$_HW_RT_DIGIT now status t what begun age waited
  local re="^hw_end ($d{1,19})( ($d{1,3}) ($d{1,19})( launch)?)? +begun( ($d{1,19}))? *\$"
  local deadline=$((SECONDS + _HW_RT_ASK_SECONDS))
  HW_RT_END_STATUS='' HW_RT_END_TIME='' HW_RT_END_WHAT='' HW_RT_ERROR=''
  HW_RT_IDLE_STATUS='' HW_RT_IDLE_AGE=''
  if [ -z "${EPOCHREALTIME:-}" ]; then slack=1000000; fi  # whole seconds: err towards older
  # The dialogue: HOST says hw_ready, this side notes its clock and says go, HOST answers
  # with its time (microseconds; a date without %N gives the end of its second: the record
  # older), the record and the mark of a running launch (read before the record: the first
  # keeps its end, then removes the mark); then ssh's status. The remote side is the
  # user's login shell: POSIX sh only, its $(...) runs there. The coproc outlives ssh until
  # told (the last read): its file descriptors stay this function's to read and close. ssh
  # runs as the coproc's own job, so that a TERM to the coproc ends an ssh that hangs (a
  # login or a remote command that never returns, which ServerAlive does not see: HOST
  # answers).
  coproc _HW_RT_ASK {
    trap 'kill $(jobs -pr) 2>/dev/null' TERM  # ssh while it runs, never a reaped pid
    ssh -o BatchMode=yes -o ConnectTimeout=5 -o ServerAliveInterval=5 \
      -o ServerAliveCountMax=2 -p "$2" "$1" \
      "echo hw_ready; read -r go; t=\$(date +%s%N 2>/dev/null); case \$t in ''|*[!0123456789]*) t=\$(date +%s)999999999 ;; esac; b=\$(cat $3/begun.$1 2>/dev/null); echo \"hw_end \${t%???} \$(cat $3/end.$1 2>/dev/null) begun \$b\"" \
      <&0 2>&1 &
    wait "$!"
    echo "hw_ssh_exit $?"
    read -r _
  }
  pid=$_HW_RT_ASK_PID rfd=${_HW_RT_ASK[0]} wfd=${_HW_RT_ASK[1]}
  while left=$((deadline - SECONDS)) && [ "$left" -gt 0 ] &&
        IFS= read -r -t "$left" line <&"$rfd"; do
    line=${line%$'\r'}
    if [[ $line =~ ^hw_ssh_exit\ ($_HW_RT_DIGIT+)$ ]]; then
      rc=${BASH_REMATCH[1]}
      break
    elif [ "$line" = hw_ready ] && [ -z "$t1" ]; then
      hw_rt_clock t1
      printf 'go\n' >&"$wfd"
    elif [ -n "$t1" ] && [[ $line =~ $re ]]; then
      said=$line
    elif [ -n "$line" ]; then
      last=$line
    fi
  done
  # The coproc is signalled while its input is open: it cannot have ended before its last
  # read, so the pid is still its own.
  if [ -z "$rc" ]; then  # ssh still runs: the coproc ends it (its TERM trap), then itself
    kill "$pid" 2>/dev/null || true  # the coproc this function started, never a pid file's
  fi
  exec {wfd}>&-  # ssh's input ends, and the coproc's last read
  wait "$pid" 2>/dev/null || true
  if [ -z "$said" ]; then
    if [ -z "$rc" ]; then HW_RT_ERROR="$1 gave no answer within ${_HW_RT_ASK_SECONDS}s${last:+: $last}"
    elif [ "$rc" -ne 0 ]; then HW_RT_ERROR="ssh to $1 failed${last:+: $last}"
    else HW_RT_ERROR="$1 gave no answer to ssh${last:+: $last}"; fi
    return 2
  fi
  [[ $said =~ $re ]]
  now=${BASH_REMATCH[1]} status=${BASH_REMATCH[3]} t=${BASH_REMATCH[4]}
  what=${BASH_REMATCH[5]} begun=${BASH_REMATCH[7]}
  [ -n "$t" ] || return 1
  # HOST's clock before its record (no date there, or a clock stepped back): its age unknown
  if ((10#$now < 10#$t)); then return 1; fi
  # written at (t1 - its age) or later by this clock: after START for certain, or not taken
  age=$((10#$now - 10#$t)) waited=$((10#$t1 - 10#$4))
  if ((age >= waited - slack)); then
    if [ -z "$begun" ]; then
      HW_RT_IDLE_STATUS=$((10#$status)) HW_RT_IDLE_AGE=$((age / 1000000))
    fi
    return 1
  fi
  # a launch that gave up before its job, and another begun since: that one may run it
  if [ -n "$what" ] && [ -n "$begun" ]; then return 1; fi
  HW_RT_END_STATUS=$((10#$status)) HW_RT_END_TIME=$t HW_RT_END_WHAT=job
  if [ -n "$what" ]; then HW_RT_END_WHAT=launch; fi
  return 0
}

# hw_rt_mpi_daemon [PROC]: status 0 while the MPI daemon that mpirun on the first instance
# started here over SSH runs (Open MPI 4's orted, 5's prted): a process of this user, in
# this instance's network namespace (instances that share a PID namespace, a pod's
# containers or namespace instances, see each other's processes). Its end is the job's end
# here. PROC: the proc file system (/proc). Bash alone, no procps: the worker looks once a
# second, so the last daemon found (HW_RT_DAEMON_PID) is looked at before any other.
HW_RT_DAEMON_PID=''
# shellcheck disable=SC2317,SC2329  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_mpi_daemon() {
  local proc=${1:-/proc} d comm
  for d in ${HW_RT_DAEMON_PID:+"$proc/$HW_RT_DAEMON_PID"} "$proc"/[0123456789]*; do
    [ -O "$d" ] || continue
    comm=''
    IFS= read -r comm 2>/dev/null < "$d/comm" || continue
    case $comm in
      orted|prted) if [ "$d/ns/net" -ef "$proc/self/ns/net" ]; then HW_RT_DAEMON_PID=${d##*/}; return 0; fi ;;
    esac
  done
  HW_RT_DAEMON_PID=''
  return 1
}

# Values from the environment that reach a command line (mpirun's, orted's on the other
# instances, torchrun's): each checked as its option would be, VAR naming it in the refusal.
# Blank is unset: HW_RT_VALUE "" and status 0; else HW_RT_VALUE is the value without
# surrounding blanks.
HW_RT_VALUE=''
_HW_RT_IFNAME="[!$_HW_RT_ALNUM._-]"  # a glob: a character no interface name here has

# hw_rt_iface VAR VALUE: interface names (eth0, ens5.100) or subnets (10.0.0.0/24, fd00::/64),
# comma-separated, as Open MPI's btl_tcp_if_include takes them. Open MPI puts the value in
# double quotes on orted's command line, where $(...) runs.
# shellcheck disable=SC2317,SC2329,SC2034  # the MPI launch uses it and HW_RT_VALUE; verify does not
hw_rt_iface() {
  local var=$1 value item items=() octets=() o
  HW_RT_VALUE=''
  _hw_rt_strip value "$2"
  [ -n "$value" ] || return 0
  _hw_rt_split items "$value"
  for item in "${items[@]}"; do
    if [[ $item == */* ]]; then
      if [[ $item =~ ^($_HW_RT_DIGIT{1,3}[.]){3}$_HW_RT_DIGIT{1,3}/($_HW_RT_DIGIT{1,2})$ ]] &&
         ((10#${BASH_REMATCH[2]} <= 32)); then
        IFS=. read -r -a octets <<< "${item%/*}"
        for o in "${octets[@]}"; do ((10#$o <= 255)) || item=''; done
        [ -n "$item" ] && continue
      elif [[ $item =~ ^[0123456789abcdefABCDEF:]*:[0123456789abcdefABCDEF:]*/($_HW_RT_DIGIT{1,3})$ ]] &&
           ((10#${BASH_REMATCH[1]} <= 128)); then
        continue
      fi
    elif [ "${#item}" -le 15 ] && [ -n "$item" ] && [[ $item != *$_HW_RT_IFNAME* ]] &&
         [[ $item != -* && $item != . && $item != .. ]]; then
      continue  # the kernel's IFNAMSIZ: at most 15 characters
    fi
    _hw_rt_fail '{var}={value!r} is not a list of interface names or subnets: give names such as eth0 or subnets such as 10.0.0.0/24, separated by commas' var "$var" value "$value"
    return 1
  done
  HW_RT_VALUE=$value
}

# hw_rt_address VAR VALUE: a host name (RFC 1123, so an IPv4 address too) or an IPv6 address.
# shellcheck disable=SC2317,SC2329,SC2034  # the PyTorch launch uses it and HW_RT_VALUE; verify does not
hw_rt_address() {
  local var=$1 value
  HW_RT_VALUE=''
  _hw_rt_strip value "$2"
  [ -n "$value" ] || return 0
  if ! _hw_rt_valid "$value" &&
     ! [[ ${#value} -le 45 && $value =~ ^[0123456789abcdefABCDEF:.]*:[0123456789abcdefABCDEF:.]*$ ]]; then
    _hw_rt_fail "{var}={value!r} is not a host name or an IP address: use letters, digits, '-' and '.', or an address such as 10.0.0.1" var "$var" value "$value"
    return 1
  fi
  HW_RT_VALUE=$value
}

# hw_rt_port VAR VALUE: a TCP port, 1 to 65535, ASCII digits (matched before any arithmetic).
# shellcheck disable=SC2317,SC2329,SC2034  # the PyTorch launch uses it and HW_RT_VALUE; verify does not
hw_rt_port() {
  local var=$1 value
  HW_RT_VALUE=''
  _hw_rt_strip value "$2"
  [ -n "$value" ] || return 0
  if ! [[ $value =~ ^$_HW_RT_DIGIT{1,5}$ ]] || ((10#$value < 1 || 10#$value > 65535)); then
    _hw_rt_fail '{var}={value!r} is not a TCP port: give a number from 1 to 65535' var "$var" value "$value"
    return 1
  fi
  HW_RT_VALUE=$((10#$value))
}

# hw_rt_route_dev HOST -> HW_RT_DEV, HW_RT_ADDR: the interface the route to HOST's address
# leaves by ('ip -o route get'), "" when HOST does not resolve, has no route or is this
# instance (lo); and that address.
# What a job's TCP traffic should keep to, decided on each instance: NIC names differ between
# instances (ens5 here, ens6 there).
hw_rt_route_dev() {
  HW_RT_DEV=""
  HW_RT_ADDR=$(_hw_rt_lookup "$1") || true
  [ -n "$HW_RT_ADDR" ] || return 0
  HW_RT_DEV=$(ip -o route get "$HW_RT_ADDR" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p') || true
  if [ "$HW_RT_DEV" = lo ]; then HW_RT_DEV=""; fi
}

# hw_rt_roce_gid HCA PORT -> HW_RT_GID: the lowest GID index of HCA's PORT whose type is
# RoCE v2 and whose GID is IPv4-mapped (::ffff:a.b.c.d), "" for none: what NCCL before 2.21
# must be told (NCCL_IB_GID_INDEX), read on each instance (GID tables differ with their
# addresses). The same rule as hpcwizard.detect.rdma (tests hold them equal); sysfs under
# HW_RT_SYSFS (default /sys). An unreadable slot (EINVAL for an empty one) is no GID.
# shellcheck disable=SC2317,SC2329,SC2034  # the PyTorch launch and the tests use it, MPI's does not
hw_rt_roce_gid() {
  local base=${HW_RT_SYSFS:-/sys}/class/infiniband/$1/ports/$2 f i type gid best=""
  HW_RT_GID=""
  for f in "$base"/gids/*; do
    i=${f##*/}
    [[ $i =~ ^[0123456789]{1,5}$ ]] || continue
    type=$(cat -- "$base/gid_attrs/types/$i" 2>/dev/null) || continue
    [ "${type,,}" = "roce v2" ] || continue
    gid=$(cat -- "$f" 2>/dev/null) || continue
    gid=${gid,,}
    [[ $gid == 0000:0000:0000:0000:0000:ffff:* && $gid != *:ffff:0000:0000 ]] || continue
    if [ -z "$best" ] || [ $((10#$i)) -lt $((10#$best)) ]; then best=$i; fi
  done
  if [ -n "$best" ]; then HW_RT_GID=$((10#$best)); fi
}

# hw_rt_cma: may the ranks here (sibling processes of one uid) read each other's memory with
# process_vm_readv (Linux CMA: Open MPI's single copy, UCX's cma)? -> HW_RT_CMA yes|no|unknown,
# HW_RT_CMA_WHY. Yama's ptrace_scope 0 (or no Yama) allows it, 1 too (Open MPI and UCX
# declare any process their ptracer), 2 only with CAP_SYS_PTRACE (bit 19 of CapEff), 3
# never: hpcwizard.facts.cma_allowed, the same table.
# Read under HW_RT_PROC (default /proc).
# shellcheck disable=SC2317,SC2329,SC2034  # the MPI launch uses it; PyTorch's and verify do not
hw_rt_cma() {
  local proc=${HW_RT_PROC:-/proc} line eff="" scope="" cap=""
  HW_RT_CMA=unknown HW_RT_CMA_WHY=""
  if [ -e "$proc/sys/kernel/yama/ptrace_scope" ]; then
    # read's status is 1 at a last line without a newline, which it still reads
    read -r scope 2>/dev/null < "$proc/sys/kernel/yama/ptrace_scope" || true
    [[ $scope =~ ^[0123]$ ]] || scope=""  # not Yama's: as detection reads it, no scope
  fi
  while IFS= read -r line; do
    case $line in CapEff:*) eff=${line#CapEff:}; eff=${eff//[$'\t ']/} ;; esac
  done 2>/dev/null < "$proc/self/status" || true
  if [[ $eff =~ ^[0123456789abcdefABCDEF]{1,16}$ ]]; then
    cap=no
    if (( (0x$eff >> 19) & 1 )); then cap=yes; fi
  fi
  case $scope in
    0|1) HW_RT_CMA=yes ;;
    "") if [ -n "$cap" ]; then HW_RT_CMA=yes; fi ;;
    2) if [ -n "$cap" ]; then HW_RT_CMA=$cap; fi ;;
    3) HW_RT_CMA=no ;;
  esac
  HW_RT_CMA_WHY="CAP_SYS_PTRACE ${cap:-unknown}, Yama ptrace_scope ${scope:-none}"
}

# hw_rt_forward_args NAMES PREFIXES MORE VERSION: the job's environment for mpirun, the one
# rule the launch script and verify both use (hpcwizard.job.FORWARD is its data). NAMES,
# PREFIXES and MORE are words between blanks: the names to pass, the prefixes (OMP_) of
# more, and the user's own (FORWARD_ENV, checked as names by the caller); VERSION is what
# `mpirun --version` said of Open MPI ("": another MPI, or none). ->
#   HW_RT_FORWARD     each name exported here, once: NAMES, then those with a prefix, then MORE
#   HW_RT_UNSET       MORE's names not set here (not passed: mpirun -x warns of them)
#   HW_RT_MPIRUN_AT   the mpirun on PATH, links followed ("" when none)
#   HW_RT_PREFIX      its installation when it is Open MPI outside /usr/bin, for --prefix:
#                     non-interactive ssh on the other instances does not find its orted/prted
#   HW_RT_PREFIX_WHY  prefix, not-bin (mpirun outside a bin directory: no --prefix) or ""
# shellcheck disable=SC2034  # the caller reads the results
hw_rt_forward_args() {
  local v p bindir
  local -a names=() prefixes=() more=() exported=()
  local -A set_here=()
  read -r -a names <<< "${1:-}" || true
  read -r -a prefixes <<< "${2:-}" || true
  read -r -a more <<< "${3:-}" || true
  HW_RT_FORWARD=() HW_RT_UNSET=() HW_RT_MPIRUN_AT='' HW_RT_PREFIX='' HW_RT_PREFIX_WHY=''
  mapfile -t exported < <(compgen -e)
  for v in ${exported[@]+"${exported[@]}"}; do set_here[$v]=1; done
  for v in ${names[@]+"${names[@]}"}; do _hw_rt_forward "$v"; done
  for v in ${exported[@]+"${exported[@]}"}; do
    for p in ${prefixes[@]+"${prefixes[@]}"}; do
      if [[ $v == "$p"* ]]; then _hw_rt_forward "$v"; fi
    done
  done
  for v in ${more[@]+"${more[@]}"}; do
    if [ -n "${set_here[$v]:-}" ]; then _hw_rt_forward "$v"; else HW_RT_UNSET+=("$v"); fi
  done
  HW_RT_MPIRUN_AT=$(command -v mpirun 2>/dev/null) || HW_RT_MPIRUN_AT=''
  if [ -z "$HW_RT_MPIRUN_AT" ]; then return 0; fi
  HW_RT_MPIRUN_AT=$(readlink -f -- "$HW_RT_MPIRUN_AT" 2>/dev/null || printf '%s' "$HW_RT_MPIRUN_AT")
  if [ -z "${4:-}" ]; then return 0; fi  # --prefix is Open MPI's
  bindir=${HW_RT_MPIRUN_AT%/*}
  case $bindir in
    /usr/bin|/bin|'') ;;
    */bin) HW_RT_PREFIX=${bindir%/bin} HW_RT_PREFIX_WHY=prefix ;;
    *) HW_RT_PREFIX_WHY=not-bin ;;
  esac
}

# shellcheck disable=SC2317,SC2329  # hw_rt_forward_args'
_hw_rt_forward() {  # NAME: into HW_RT_FORWARD when set here (set_here) and not there yet
  if [ -n "${set_here[$1]:-}" ] && [[ " ${HW_RT_FORWARD[*]-} " != *" $1 "* ]]; then
    HW_RT_FORWARD+=("$1")
  fi
}

# hw_rt_answer discover|rank ARG...: the answers of hw_rt_discover or hw_rt_rank for a
# program (wizard/runtime.py), each field ended by a NUL byte: discover: the source, the
# number of names, the names, the number of slots, the slots; rank: the rank. A refusal:
# status 2, its line on standard error, and on standard output as data: where (the source
# it names, or empty), the template, then KEY VALUE pairs (_hw_rt_fail). Rank of none of
# the names: status 1, nothing printed. variables: HW_RT_PLATFORM_VARS. discover ends with
# the rank variable of the source (HW_RT_RANK_VAR), rank takes it as --rank-var VAR.
# shellcheck disable=SC2317,SC2329  # called by wizard/runtime.py; the launch script has no use for it
hw_rt_answer() {
  local what=$1 rc=0 v
  shift
  case $what in
    discover)
      hw_rt_discover "$@" || { _hw_rt_refusal; return 2; }
      printf '%s\0' "$HW_RT_SOURCE" "${#HW_RT_NAMES[@]}" ${HW_RT_NAMES[@]+"${HW_RT_NAMES[@]}"} \
        "${#HW_RT_SLOTS[@]}" ${HW_RT_SLOTS[@]+"${HW_RT_SLOTS[@]}"} "$HW_RT_RANK_VAR" ;;
    rank)
      if [ "${1:-}" = --rank-var ]; then
        # one of the platforms' rank variables, or none: never a name to read from the caller
        for v in "${HW_RT_RANK_VARS[@]}"; do
          if [ "$v" = "${2:-}" ]; then HW_RT_RANK_VAR=$v; fi
        done
        shift 2
      fi
      hw_rt_rank "$@" || rc=$?
      if [ "$rc" = 1 ]; then return 1; fi
      if [ "$rc" != 0 ]; then _hw_rt_refusal; return 2; fi
      printf '%s\0' "$HW_RT_RANK" ;;
    variables) printf '%s\0' "${HW_RT_PLATFORM_VARS[@]}" ;;
    *) _hw_rt_fail 'hw_rt_answer: discover, rank or variables, not {what}' what "$what"
       _hw_rt_refusal; return 2 ;;
  esac
}

# shellcheck disable=SC2317,SC2329  # hw_rt_answer's
_hw_rt_refusal() {
  printf '%s\n' "$HW_RT_ERROR" >&2
  printf '%s\0' "$HW_RT_ERROR_WHERE" "${HW_RT_ERROR_ARGS[@]}"
}
