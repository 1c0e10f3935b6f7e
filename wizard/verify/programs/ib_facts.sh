#!/bin/bash
# hpcwizard verify: one instance's InfiniBand facts, one a line, tab-separated, each line
# starting with HPCWIZARD-IB (a login banner or a .bashrc's echo is not taken for a fact).
# Reads only. Usage: bash ib_facts.sh [ROOT [PYTHON]]
#   ROOT    prefix of /sys, /dev and /usr/lib (tests run it on fixture sysfs trees)
#   PYTHON  the interpreter whose torch reports the NCCL it links ("": not asked)
# verify runs it as `bash -c` with its comment lines left out and the others joined by "; ",
# so that the command a check shows is one line: each line here is a whole command, and
# no single quote appears (the command is quoted once more for ssh).
# Bash builtins for the files (no cat, no ls): the facts do not depend on coreutils.
root=${1:-/}
root=${root%/}
py=${2-}
tag=HPCWIZARD-IB
val() { v=; [ -r "$1" ] && IFS= read -r v <"$1"; printf %s "$v"; }
for p in "$root"/sys/class/infiniband/*/ports/*; do [ -d "$p" ] || continue; h=${p%/ports/*}; printf "%s\tport\t%s\t%s\t%s\t%s\t%s\n" "$tag" "${h##*/}" "${p##*/}" "$(val "$p/state")" "$(val "$p/rate")" "$(val "$p/link_layer")"; done
for d in "$root"/dev/infiniband/uverbs*; do [ -e "$d" ] && printf "%s\tuverbs\t%s\n" "$tag" "${d#"$root"}"; done
printf "%s\tmemlock\t%s\n" "$tag" "$(ulimit -l)"
# Only ucx_info -v's version lines: the rest names build paths and configure flags.
if command -v ucx_info >/dev/null 2>&1; then ucx_info -v 2>&1 | while IFS= read -r line; do case $line in *[Vv]ersion*) printf "%s\tucx\t%s\n" "$tag" "$line" ;; esac; done; fi
# torch.cuda.nccl.version() is an int before torch 1.13 (2708, 21805), a tuple after; a CPU
# build has none (the import or the call fails: nothing printed). Bounded: importing torch
# from a slow shared disk can take a minute.
t=; command -v timeout >/dev/null 2>&1 && t="timeout 60"
if [ -n "$py" ]; then printf "%s\tnccl\t%s\n" "$tag" "$($t "$py" -c "import torch.cuda.nccl as n; v = n.version(); v = ((v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)) if isinstance(v, int) else v; print(*v, sep=chr(46))" 2>/dev/null)"; fi
for f in "$root"/usr/lib/*/libibverbs.so.1.* "$root"/usr/lib64/libibverbs.so.1.* "$root"/usr/lib/libibverbs.so.1.*; do [ -e "$f" ] && { printf "%s\tlibibverbs\t%s\n" "$tag" "${f##*/libibverbs.so.}"; break; }; done
printf "%s\tend\n" "$tag"
