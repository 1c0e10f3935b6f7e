#!/bin/bash
# hpcwizard verify --fleet: one instance's health, one fact a line, tab-separated, each line
# starting with HPCWIZARD-HEALTH (a login banner or a .bashrc's echo is not taken for one).
# Reads only. Usage: bash health.sh [ROOT]
#   ROOT  prefix of /sys (tests run it on fixture sysfs trees)
# verify runs it as `bash -c` with its comment lines left out and the others joined by "; ",
# so that the command the report shows is one line: each line here is a whole command, and
# no single quote appears (the command is quoted once more for ssh).
# Bash builtins for the files (no cat, no ls): the facts do not depend on coreutils.
root=${1:-/}
root=${root%/}
tag=HPCWIZARD-HEALTH
val() { v=; [ -r "$1" ] && IFS= read -r v <"$1"; printf %s "$v"; }
# Each InfiniBand port's error counters that its driver has (a missing file is left out).
for p in "$root"/sys/class/infiniband/*/ports/*; do [ -d "$p/counters" ] || continue; h=${p%/ports/*}; for c in link_downed link_error_recovery symbol_error port_rcv_errors local_link_integrity_errors excessive_buffer_overrun_errors port_xmit_discards; do [ -r "$p/counters/$c" ] && printf "%s\tib\t%s\t%s\t%s\t%s\n" "$tag" "${h##*/}" "${p##*/}" "$c" "$(val "$p/counters/$c")"; done; done
# nvidia-smi hangs on a GPU that fell off the bus: bounded where timeout is there.
t=; command -v timeout >/dev/null 2>&1 && t="timeout 30"
q=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending,remapped_rows.failure
# A driver older than row remapping refuses the whole query over one unknown field.
q_old=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,retired_pages.pending
gpus() { out=$($t nvidia-smi --query-gpu="$1" --format=csv,noheader,nounits 2>&1) || { rc=$?; [ -n "$out" ] || out="nvidia-smi exited $rc with no output"; return 1; }; printf "%s\tgpu-fields\t%s\n" "$tag" "$1"; while IFS= read -r line; do [ -n "$line" ] && printf "%s\tgpu\t%s\n" "$tag" "$line"; done <<<"$out"; }
smi=; command -v nvidia-smi >/dev/null 2>&1 && smi=yes
if [ -z "$smi" ]; then printf "%s\tgpu-tool\tabsent\n" "$tag"; elif ! gpus "$q" && ! gpus "$q_old"; then while IFS= read -r line; do [ -n "$line" ] && printf "%s\tgpu-error\t%s\n" "$tag" "$line"; done <<<"$out"; fi
if [ -n "$smi" ]; then $t nvidia-smi nvlink -s 2>&1 | while IFS= read -r line; do printf "%s\tnvlink\t%s\n" "$tag" "$line"; done; fi
printf "%s\tend\n" "$tag"
