"""The per-instance launch script (`export --format launch`): the same file, run the same way
on every instance of the job, with the user's program as its arguments:

    bash launch.sh [--hosts a,b,c | --hostfile FILE] [--] PROGRAM [ARGS...]
    bash launch.sh -- python train.py --lr 0.1

It starts sshd if nothing listens on the port (MPI; as root: /run/sshd, `ssh-keygen -A` when
there are no host keys, /usr/sbin/sshd; as another user: sshd -f ~/.sshd_config), finds the
job's hosts and its own rank with recipes/runtime.sh (the library `hpcwizard verify` runs:
the same hosts, in the same order), waits for every peer (bounded retries with backoff on
the name and the SSH port), writes the hostfile, and
then either runs `mpirun` on the first host (the others wait until it tells them the job has
ended), or `torchrun` on every host with MASTER_ADDR, --nnodes and --node-rank. The plan's
launch environment (NCCL_*, UCX_*) and mpirun arguments (port, --mca pml ucx, ...) are
written in. Whether sshd runs as root or as the user is decided when the script runs, so the
same script serves a preset image whose user is not known here; so is which Open MPI runs
(`mpirun --version`: 5.x gets PRRTE's names, see hpcwizard.render.mpirun), and the TCP interface
mpirun keeps to (`ip route get` of the second host's address: its `dev`).
"""
from __future__ import annotations

import shlex
import textwrap
from typing import List

from .. import __version__, ops, runtime
from ..i18n import _, comment
from ..job import FORWARD, Job
from ..vocab import EXPORT_FILE_NAMES
from .mpirun import (IFACE_ARGS_4, IFACE_ARGS_5, NO_CMA_ENV, OMPI_VERSION_SH, mpirun_args,
                     no_cma_args)
from .shell import TORCH_PROGRAM_SH, checked_env, planned_env_lines

# what the script's comments tell you to run; its usage names the file it runs as ($0)
LAUNCH_NAME = EXPORT_FILE_NAMES["launch"]

_BODY = r'''
log() { printf 'launch[%s]: %s\n' "${ME:-$(hostname)}" "$*" >&2; }
die() { log "$*"; exit 2; }

usage() {
  printf 'usage: %s [--hosts a,b,c | --hostfile FILE] [--] PROGRAM [ARGS...]\n' "${0##*/}"
  cat <<'USAGE'
Run the same command on every instance of the job.
PyTorch: PROGRAM is python [-u] SCRIPT, python [-u] -m MODULE, SCRIPT.py, or another
  program (torchrun --no-python); the interpreter's other options are refused.
Hosts, the first source that names any: --hosts, --hostfile, HOSTS, HOSTFILE,
  OMPI_MCA_orte_default_hostfile, OMPI_MCA_prte_default_hostfile,
  PRTE_MCA_prte_default_hostfile, SKYPILOT_NODE_IPS, DSTACK_NODES_IPS (slots from
  DSTACK_MPI_HOSTFILE), MLP_WORKER_ALL_HOSTS, SLURM_JOB_NODELIST, SLURM_NODELIST,
  VC_*_HOSTS (Volcano, ModelArts), MASTER_ADDR (or PET_MASTER_ADDR) with PET_NNODES, or
  with WORLD_SIZE divided by PET_NPROC_PER_NODE (Kubeflow: a PyTorchJob's WORLD_SIZE
  counts processes, PET_NNODES nodes; PET_NNODES alone, or an elastic MIN:MAX, names no
  hosts; PAI-DLC: WORLD_SIZE counts nodes). Items may be patterns: job-{0..3},
  node[01-03,07]; the platforms' IP lists are taken as they are.
Rank: NODE_RANK, else PET_NODE_RANK, else the rank variable of the platform that named
  the hosts (SKYPILOT_NODE_RANK, DSTACK_NODE_RANK, MLP_ROLE_INDEX of a WORKER,
  VC_TASK_INDEX of a single Volcano task, RANK where WORLD_SIZE counts nodes and
  LOCAL_RANK is unset), else this host's name, else its address.
Settings (environment): WAIT_TRIES (peer waits, default 10), SLOTS (ranks per host;
  default: a hostfile's slots=, else 1), NP (total ranks; default: the slots'), NODE_RANK (this host's index; else PET_NODE_RANK),
  MASTER_ADDR (torchrun's rendezvous host; else PET_MASTER_ADDR, else the first host),
  MASTER_PORT (else PET_MASTER_PORT, else 29500), NPROC_PER_NODE (torchrun's processes
  here; else PET_NPROC_PER_NODE, a number or torchrun's auto, cpu, gpu, xpu; default:
  the GPUs, or 1), WORKER_TIMEOUT (seconds a worker waits for the end of the job;
  0: no limit), FIRST_GONE_AFTER (a worker ends, exit 3, when the first instance's sshd
  has not answered for this many seconds, or when its MPI daemon, orted or prted, has
  been gone this long and the first instance has no record of the job's end; one the end
  of the job has not reached asks the first instance for the job's status about as often
  (every N/4 seconds at least; once its MPI daemon has ended, when one was seen) and ends
  with it; default 60, 0: neither), TCP_IFACE (mpirun: the
  interface for MPI's TCP traffic, a name or a subnet such as 10.0.0.0/24; default: the
  interface the route to the second host goes through).
__FORWARD_USAGE__
USAGE
}

HOST_ARGS=()  # --hosts and --hostfile as given, for hw_rt_discover
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) [ $# -ge 2 ] || die "--hosts needs a value"; HOST_ARGS+=(--hosts "$2"); shift 2 ;;
    --hosts=*) HOST_ARGS+=(--hosts "${1#*=}"); shift ;;
    --hostfile) [ $# -ge 2 ] || die "--hostfile needs a value"; HOST_ARGS+=(--hostfile "$2"); shift 2 ;;
    --hostfile=*) HOST_ARGS+=(--hostfile "${1#*=}"); shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; die "no program given"; }

WAIT_TRIES=${WAIT_TRIES:-10}
# Numbers from the environment, ASCII digits only: bash arithmetic would run the $(...) in
# a value such as 'a[$(id)]'.
for v in WAIT_TRIES SLOTS NP WORKER_TIMEOUT FIRST_GONE_AFTER NPROC_PER_NODE; do
  if [ -n "${!v:-}" ] && ! [[ ${!v} =~ ^[0123456789]{1,6}$ ]]; then
    die "$v=${!v} is not a number (digits 0-9 only)"
  fi
done
RUN_REL=.hpcwizard/launch  # under the home, where ssh logs in on every instance
RUN_DIR="$HOME/$RUN_REL"
(umask 077 && mkdir -p "$RUN_DIR")  # made 0700: the hostfile and the job's markers are the user's

# --- hosts, this instance's rank, sshd, peers: recipes/runtime.sh (hpcwizard verify runs
# the same library, so it checks these hosts in this order) ------------------------------

__OPS_FUNCTIONS__

__RUNTIME__

# when this run began: a worker takes only a record of the job's end written after it; the
# first instance says where its time went
# shellcheck disable=SC2034  # the MPI launch reads it
hw_rt_clock T_START

hw_rt_discover ${HOST_ARGS[@]+"${HOST_ARGS[@]}"} || die "$HW_RT_ERROR"
[ "${#HW_RT_NAMES[@]}" -gt 0 ] || die "no hosts: give --hosts a,b,c or --hostfile FILE (see --help)"
NAMES=("${HW_RT_NAMES[@]}")
SOURCE=$HW_RT_SOURCE
N=${#NAMES[@]}
FIRST=${NAMES[0]}
# Which of the names is this instance: NODE_RANK, else PET_NODE_RANK, else the rank
# variable of the platform that named them (HW_RT_RANK_VAR), else the host name, else an
# address.
hw_rt_rank "${NAMES[@]}" || die "$HW_RT_ERROR"
RANK=$HW_RT_RANK
ME=${NAMES[$RANK]}
log "hosts from $SOURCE: ${NAMES[*]} (this is $ME, rank $RANK of $N)"
if [ "${#ENV_KEPT[@]}" -gt 0 ]; then log "from the environment, not the plan: ${ENV_KEPT[*]}"; fi
'''

_MPI = r'''
# keep_end STATUS [launch]: the first instance's record of its end, for a worker this
# instance cannot tell to ask for; then no launch runs here
keep_end() {
  hw_rt_end_record "$RUN_DIR/end.$ME" "$@" ||
    log "could not keep the job's status in $RUN_DIR/end.$ME: a worker not told cannot ask for it"
  rm -f "$RUN_DIR/begun.$ME" 2>/dev/null || true
}
if [ "$RANK" -eq 0 ]; then
  # Until mpirun runs, an end of this launch (a worker never ready, a refusal, a signal) is
  # kept as the job's end would be, marked as the launch's: a worker waiting for a job that
  # will not come learns it when it asks, and ends. Its waits for workers' ports end too.
  # shellcheck disable=SC2317,SC2329  # the EXIT trap runs it
  launch_ended() {
    local status=$?
    # shellcheck disable=SC2046  # one pid a word
    kill $(jobs -pr) 2>/dev/null || true  # its own waits for workers' ports
    keep_end "$status" launch
  }
  trap launch_ended EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # while this launch runs, a worker that asks learns that one runs here
  hw_rt_begun_record "$RUN_DIR/begun.$ME" ||
    log "could not mark $RUN_DIR/begun.$ME: a worker that asks may take this instance to run no launch"
fi
# ranks per host: SLOTS, else the hostfile's slots=, else 1; NP, else their sum
hw_rt_slots "${SLOTS:-}" "${NP:-}" || die "$HW_RT_ERROR"
SLOTS_OF=$(IFS=,; printf '%s' "${HW_RT_HOST_SLOTS[*]}")
NP=$HW_RT_NP
# TCP_IFACE reaches orted's command line on every instance, in double quotes: checked here,
# before sshd starts or a peer is waited for.
hw_rt_iface TCP_IFACE "${TCP_IFACE:-}" || die "$HW_RT_ERROR"
TCP_IFACE=$HW_RT_VALUE
# FORWARD_ENV: more names for every rank, separated by blanks or commas; each checked here,
# before sshd starts or a peer is waited for (mpirun -x takes NAME or NAME=VALUE).
FORWARD_MORE=()
v=${FORWARD_ENV:-}
IFS=$' \t\n' read -r -d '' -a FORWARD_MORE <<< "${v//,/ }" || true
for v in ${FORWARD_MORE[@]+"${FORWARD_MORE[@]}"}; do
  if ! [[ $v =~ ^[ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_][ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_]*$ ]]; then
    printf -v v '%q' "$v"
    die "FORWARD_ENV: $v is not a variable name (letters, digits and _, not first a digit)"
  fi
done
DONE="$RUN_DIR/done.$ME"
# the marker: the job's status and the time of the first instance's record, which names
# that end (hw_rt_end_record)
done_rc() { { read -r rc end_t < "$DONE"; } 2>/dev/null && [[ $rc =~ ^[0123456789]{1,3}$ ]]; }
# TAKEN: the end the last launch here took (its time), or "owed" from the moment a launch
# starts waiting until it takes one; a launch killed, or ended without its end, leaves "owed".
TAKEN="$RUN_DIR/taken.$ME"
took() {
  local t=owed
  if [[ ${1:-} =~ ^[0123456789]{1,19}$ ]]; then t=$1; fi
  { printf '%s\n' "$t" > "$TAKEN"; } 2>/dev/null || true
}
# take_end TIME LINE: this launch takes the end named TIME (its status in rc) and ends with it
take_end() {
  took "$1"
  rm -f "$DONE"
  log "$2"
  exit "$rc"
}
# a marker naming the end taken last is a tell tried again, never this run's: cleared
new_end() {
  done_rc || return 1
  if [ -n "${taken_last:-}" ] && [ "$end_t" = "$taken_last" ]; then rm -f "$DONE"; return 1; fi
}
if [ "$RANK" -ne 0 ]; then
  # how long a worker waits for a first instance that has not come
  gone_after=$((10#${FIRST_GONE_AFTER:-60}))
  hw_rt_wait_seconds "$WAIT_TRIES"
  first_wait=$HW_RT_SECONDS
  if [ "$first_wait" -lt "$gone_after" ]; then first_wait=$gone_after; fi
  # A marker found now came while no launch here waited: through an sshd already up, the
  # first instance ran the job here and told its end before this launch began. It is this
  # run's end when no launch here is owed one, it names an end other than the one taken
  # last, and it is no older than that wait. Else it may be an earlier run's late word,
  # cleared before the peer waits below, during which this run's may come (a short job).
  owed="" taken_last=""  # none when no launch ran here
  if [ -e "$TAKEN" ]; then
    { read -r taken_last < "$TAKEN"; } 2>/dev/null || true
    [[ $taken_last =~ ^[0123456789]{1,19}$ ]] || owed=1 taken_last=""
  fi
  if new_end; then
    told=$(date -r "$DONE" +%s 2>/dev/null) || told=0
    printf -v now '%(%s)T' -1
    if [ -z "$owed" ] && [[ $end_t =~ ^[0123456789]{1,19}$ ]] &&
       [ $((now - told)) -le "$first_wait" ]; then
      take_end "$end_t" "the job had ended, with status $rc, when this launch began: $FIRST told this instance $((now - told))s ago (it ran the job through the sshd already up on port $PORT here)"
    fi
    rm -f "$DONE"
  fi
  took owed
fi
hw_rt_sshd "$PORT" || die "$HW_RT_ERROR"

# par LIMIT FUNCTION ITEM...: FUNCTION ITEM for every item, LIMIT at a time, in the
# background -> PAR_FAILED, the items whose FUNCTION failed. The first instance's work per
# worker (its port, the end of the job) runs side by side: N workers cost a few rounds, not
# N times the slowest one.
par() {
  local limit=$1 fn=$2 item i
  shift 2
  local -a pids=() items=()
  PAR_FAILED=()
  for item in "$@"; do
    while [ "$(jobs -pr | wc -l)" -ge "$limit" ]; do wait -n 2>/dev/null || sleep 0.1; done
    "$fn" "$item" &
    pids+=("$!") items+=("$item")
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || PAR_FAILED+=("${items[$i]}"); done
}
AT_ONCE=32  # the first instance's connections at a time: below sshd's MaxStartups refusals
# A worker needs only the first instance's name (mpirun there starts the ranks here over
# SSH; the wait below watches its port): N workers' probes at once would all land on the
# first instance's sshd. The first instance needs every worker's sshd before mpirun.
if [ "$RANK" -ne 0 ]; then
  hw_rt_wait "$FIRST" "$WAIT_TRIES" || die "$HW_RT_ERROR"
else
  # shellcheck disable=SC2317,SC2329  # par runs it
  wait_port() {  # its error line into RUN_DIR: a background job's variables die with it
    rm -f "$RUN_DIR/wait.$1"
    hw_rt_wait "$1" "$WAIT_TRIES" "$PORT" || { printf '%s\n' "$HW_RT_ERROR" > "$RUN_DIR/wait.$1"; return 1; }
  }
  par "$AT_ONCE" wait_port "${NAMES[@]:1}"
  hw_rt_clock T_READY
  if [ "${#PAR_FAILED[@]}" -gt 0 ]; then
    first_error=$(cat "$RUN_DIR/wait.${PAR_FAILED[0]}" 2>/dev/null) || first_error="${PAR_FAILED[0]}: not ready"
    if [ "${#PAR_FAILED[@]}" -gt 1 ]; then
      die "$first_error; not ready either: ${PAR_FAILED[*]:1}"
    fi
    die "$first_error"
  fi
fi

HOSTFILE_OUT="$RUN_DIR/hostfile.$ME"
hw_rt_write_hostfile "$HOSTFILE_OUT" "$SLOTS_OF" "${NAMES[@]}"

if [ "$RANK" -ne 0 ]; then
  # A worker: mpirun on the first host starts the ranks here over SSH, then tells us the end.
  # The first instance is watched meanwhile: gone for FIRST_GONE_AFTER seconds (its sshd does
  # not answer), nobody is left to tell us, and the worker ends by itself. Alive but its word
  # lost on the way here, it is asked for its record of the end about every ask_every
  # seconds, at a random point of each period: N/4 at the least, so that all the workers
  # together log in on the first instance about 4 times a second at most. The job's MPI
  # daemon here (hw_rt_mpi_daemon) says when the end is due: while it runs nobody is asked;
  # once it has ended the marker has END_GRACE seconds to come before the asking starts, and
  # when it has been gone FIRST_GONE_AFTER seconds an ask that brings no status ends the
  # worker (a first instance killed before it kept its record). A daemon never seen (a job
  # shorter than a look, a worker started after it) leaves the asking as it was.
  every=$((gone_after / 6))
  if [ "$every" -lt 1 ]; then every=1; elif [ "$every" -gt 10 ]; then every=10; fi
  ask_every=$gone_after
  if [ "$ask_every" -lt $((N / 4)) ]; then ask_every=$((N / 4)); fi
  END_GRACE=5
  next_ask() { ask_at=$((SECONDS + ask_every / 2 + RANDOM % (ask_every + 1))); }
  next_ask
  # Until the first instance has answered once it may still be starting (its image pulled,
  # its sshd not up): probed as the watch does, for first_wait: as long as WAIT_TRIES' waits
  # add up to, or FIRST_GONE_AFTER when that is longer. A job's daemon seen here counts as
  # its answer.
  started=$SECONDS answered="" probed=$SECONDS ask_failed="" daemon="" daemon_ended=""
  look_for_daemon() {
    looked=$SECONDS
    if hw_rt_mpi_daemon; then
      # mpirun on the first instance started it over SSH: the first has answered. Said as
      # it appears: a worker whose log never says it was not reached by mpirun.
      [ "$daemon" = running ] || log "$FIRST started the job here (its MPI daemon: pid $HW_RT_DAEMON_PID)"
      daemon=running daemon_ended="" answered=${answered:-$SECONDS}
    elif [ "$daemon" = running ]; then
      # the asks of workers not told spread over half a period, not all at one moment
      daemon=ended daemon_ended=$SECONDS
      ask_at=$((SECONDS + END_GRACE + RANDOM % (ask_every / 2 + 1)))
    fi
  }
  # the first instance's word ends the rest below at once, not at the next second
  WAKE="$RUN_DIR/wake.$ME"
  trap 'rm -f "$WAKE"' EXIT
  hw_rt_wake "$WAKE" || log "no FIFO at $WAKE: the end of the job is seen within a second"
  log "waiting for $FIRST to run the job"
  # a worker started into a running job finds its daemon before the job can end unseen
  if [ "$gone_after" -gt 0 ]; then look_for_daemon; fi
  while ! new_end; do
    hw_rt_rest 1
    if [ "${WORKER_TIMEOUT:-0}" -gt 0 ] && [ $((SECONDS - started)) -ge "${WORKER_TIMEOUT:-0}" ]; then
      die "the job did not end within ${WORKER_TIMEOUT}s (WORKER_TIMEOUT)"
    fi
    # the first instance's port: not come yet, or gone (with FIRST_GONE_AFTER 0, never gone)
    if [ $((SECONDS - probed)) -ge "$every" ] && { [ -z "$answered" ] || [ "$gone_after" -gt 0 ]; }; then
      probed=$SECONDS
      if _hw_rt_port_open "$FIRST" "$PORT"; then
        answered=$SECONDS
      elif [ -z "$answered" ]; then
        if [ $((SECONDS - started)) -ge "$first_wait" ]; then
          die "$FIRST: port $PORT not ready after $((SECONDS - started))s (WAIT_TRIES=$WAIT_TRIES); the first instance runs the job"
        fi
      elif [ ! -e "$DONE" ] && [ $((SECONDS - answered)) -ge "$gone_after" ]; then
        log "$FIRST (the first instance) has not answered on port $PORT for $((SECONDS - answered))s (FIRST_GONE_AFTER=$gone_after): ending without the job's status"
        exit 3
      fi
    fi
    [ "$gone_after" -gt 0 ] || continue
    # A running daemon is looked at every second (its pid first, one file); a search of
    # every process only every few seconds: instances that share a process list (a pod's
    # containers, or many on one machine) each read all of it.
    if [ "$daemon" = running ] || [ $((SECONDS - looked)) -ge "$every" ]; then look_for_daemon; fi
    [ "$daemon" != running ] || continue
    if [ "$SECONDS" -ge "$ask_at" ] && [ "$answered" = "$probed" ]; then
      next_ask
      asked=0
      hw_rt_end_ask "$FIRST" "$PORT" "$RUN_REL" "$T_START" || asked=$?
      if new_end; then break; fi
      if [ "$asked" -eq 0 ]; then
        rc=$HW_RT_END_STATUS
        if [ "$HW_RT_END_WHAT" = launch ]; then
          take_end "$HW_RT_END_TIME" "the job did not run: $FIRST's launch ended with status $rc before its mpirun (from its record; its log says why)"
        fi
        take_end "$HW_RT_END_TIME" "the job ended with status $rc (from $FIRST's record: it could not tell this instance)"
      elif [ -n "$HW_RT_IDLE_AGE" ] && [ -z "$daemon" ] && [ $((SECONDS - started)) -ge "$first_wait" ]; then
        # no launch there to run the job here: none runs there (no mark), its last end
        # came before this launch began, and none has begun in a worker's wait for one
        log "$FIRST (the first instance) runs no launch: its last ended ${HW_RT_IDLE_AGE}s ago with status $HW_RT_IDLE_STATUS, before this one began, and none has begun in ${first_wait}s (WAIT_TRIES=$WAIT_TRIES, FIRST_GONE_AFTER=$gone_after): ending without the job's status"
        exit 3
      elif [ -n "$daemon_ended" ] && [ $((SECONDS - daemon_ended)) -ge "$gone_after" ]; then
        why="has no record of its end"
        if [ "$asked" -eq 2 ]; then why="could not be asked for its end ($HW_RT_ERROR)"; fi
        log "the job's MPI daemon here ended $((SECONDS - daemon_ended))s ago and $FIRST (the first instance) $why (FIRST_GONE_AFTER=$gone_after): ending without the job's status"
        exit 3
      elif [ "$asked" -eq 2 ] && [ -z "$ask_failed" ]; then
        ask_failed=1
        log "could not ask $FIRST for the end of the job ($HW_RT_ERROR); asking again about every ${ask_every}s"
      fi
    fi
  done
  take_end "$end_t" "the job ended with status $rc"
fi

ROOT_ARGS=()
if [ "$(id -u)" -eq 0 ]; then ROOT_ARGS=(--allow-run-as-root); fi
# MPI's TCP traffic on the interface that reaches the peers, not on every one (docker0, a
# second NIC that does not route there): the route to the first peer names it.
IFACE=""
if [ "$N" -gt 1 ]; then
  if [ -n "${TCP_IFACE:-}" ]; then
    IFACE=$TCP_IFACE
    log "TCP interface $IFACE, from TCP_IFACE"
  else
    hw_rt_route_dev "${NAMES[1]}"  # "" for lo: the name is this instance's
    IFACE=$HW_RT_DEV
    if [ -n "$IFACE" ]; then
      log "TCP interface $IFACE, from the route to ${NAMES[1]} ($HW_RT_ADDR)"
    else
      log "TCP interface not chosen ('ip route get' gave none for ${NAMES[1]}):" \
        "MPI tries every interface"
    fi
  fi
fi

# Open MPI 5 (PRRTE) names the ssh and interface settings differently from 4 (ORTE): the
# mpirun installed here says which one it is.
OMPI_VERSION=$(__OMPI_VERSION_SH__) || true
OMPI_MAJOR=${OMPI_VERSION%%.*}
if [[ $OMPI_MAJOR =~ ^[0-9]+$ ]] && [ "$OMPI_MAJOR" -ge 5 ]; then
  MPIRUN_ARGS=(${MPIRUN_ARGS_5[@]+"${MPIRUN_ARGS_5[@]}"})
  IF_NAMES=(__IFACE_ARGS_5__)
else
  IF_NAMES=(__IFACE_ARGS_4__)
fi
# mpirun's SSH connections to the workers stay open for a while after the job (ssh's
# connection sharing, its sockets in RUN_DIR): telling a worker the end is then one more
# session on its connection, not a new login, which cost as much as mpirun's own logins.
# ssh reads the ~ itself, from the password file, so a worker's orted that starts others
# (tree spawn) finds its own directory; where that home is not $HOME, nothing is shared (a
# socket ssh cannot make there fails the login). A socket's path has at most 107 bytes (%C
# is 40 of them, and ssh binds the path with 17 more before renaming it), and ORTE splits
# these arguments at blanks: a home that does not fit, or has other characters, shares
# nothing. A connection whose worker stops answering ends within a minute (ServerAlive),
# not when TCP gives up a quarter of an hour later, so a tell over it cannot hang.
SHARE=()
ssh_home=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6) || ssh_home=''
if [ -n "$ssh_home" ] && [ "$ssh_home" -ef "$HOME" ] && [ -d "$ssh_home/$RUN_REL" ] &&
  [[ $ssh_home != *[!$_HW_RT_ALNUM/._-]* ]] && [ $((${#ssh_home} + ${#RUN_REL} + 42 + 17)) -le 107 ]; then
  SHARE=(-o "ControlPath=~/$RUN_REL/%C")
  for i in "${!MPIRUN_ARGS[@]}"; do
    case ${MPIRUN_ARGS[i]} in
      plm_rsh_args|plm_ssh_args)
        MPIRUN_ARGS[i + 1]+=" -o ControlMaster=auto -o ControlPersist=60 -o ServerAliveInterval=10 -o ServerAliveCountMax=6 ${SHARE[*]}" ;;
    esac
  done
fi
# The job's environment on every rank (the rule above FORWARD_NAMES), each name set here
# once, and an Open MPI outside /usr/bin (a pip wheel in a venv, HPC-X, an environment
# module) with --prefix: non-interactive ssh on the other instances reads no profile, so
# without them a rank there runs another python, misses OMP_NUM_THREADS, or finds no
# orted/prted. hw_rt_forward_args is the rule, the one verify runs too.
hw_rt_forward_args "${LAUNCH_ENV[*]-} ${FORWARD_NAMES[*]}" "${FORWARD_PREFIXES[*]}" \
  "${FORWARD_MORE[*]-}" "$OMPI_VERSION"
for v in ${HW_RT_UNSET[@]+"${HW_RT_UNSET[@]}"}; do
  log "FORWARD_ENV names $v, which is not set here: not forwarded"
done
X_ARGS=()
for v in ${HW_RT_FORWARD[@]+"${HW_RT_FORWARD[@]}"}; do X_ARGS+=(-x "$v"); done
PREFIX_ARGS=()
case $HW_RT_PREFIX_WHY in
  prefix)
    PREFIX_ARGS=(--prefix "$HW_RT_PREFIX")
    printf -v v '%q' "$HW_RT_PREFIX"
    log "mpirun at $(printf '%q' "$HW_RT_MPIRUN_AT"): --prefix $v, so that the other instances find its orted/prted" ;;
  not-bin) log "mpirun at $(printf '%q' "$HW_RT_MPIRUN_AT"), not in a bin directory: no --prefix; its orted/prted must be on the other instances' PATH" ;;
esac
# The ranks on this instance may not read each other's memory (Yama's ptrace_scope 2 without
# CAP_SYS_PTRACE, or 3): Open MPI's single copy (CMA) and UCX's cma transport would fail
# between them, so both are turned off; checked here, in the container that runs.
hw_rt_cma
if [ "$HW_RT_CMA" = no ]; then
  NO_CMA=(__NO_CMA_ARGS_4__)
  if [[ $OMPI_MAJOR =~ ^[0-9]+$ ]] && [ "$OMPI_MAJOR" -ge 5 ]; then NO_CMA=(__NO_CMA_ARGS_5__); fi
  MPIRUN_ARGS+=("${NO_CMA[@]}")
  if [ -z "${UCX_TLS+set}" ]; then
    export UCX_TLS=__NO_CMA_UCX_TLS__
    X_ARGS+=(-x UCX_TLS)
    log "single-copy off ($HW_RT_CMA_WHY): ${NO_CMA[*]} -x UCX_TLS=$UCX_TLS"
  else
    log "single-copy off ($HW_RT_CMA_WHY): ${NO_CMA[*]}; UCX_TLS=$UCX_TLS is yours, kept"
  fi
fi
IFACE_ARGS=()
if [ -n "$IFACE" ]; then  # MPI's TCP, then the runtime's: each flag, its name, the interface
  IFACE_ARGS=("${IF_NAMES[0]}" "${IF_NAMES[1]}" "$IFACE" "${IF_NAMES[2]}" "${IF_NAMES[3]}" "$IFACE")
fi

# Every name a rank gets (mpirun -x): MPIRUN_ARGS' own, then the rule's.
GIVEN=() prev=""
for v in ${MPIRUN_ARGS[@]+"${MPIRUN_ARGS[@]}"} ${X_ARGS[@]+"${X_ARGS[@]}"}; do
  if [ "$prev" = -x ]; then GIVEN+=("$v"); fi
  prev=$v
done
log "to every rank (mpirun -x): ${GIVEN[*]-}"
# The program as the shell would read it back: its quoting kept, control characters escaped.
printf -v SHOWN ' %q' "$@"
log "mpirun${OMPI_VERSION:+ (Open MPI $OMPI_VERSION)} -np $NP on ${NAMES[*]}:$SHOWN"
trap - EXIT HUP INT TERM  # from here on the job's end is kept, and told
hw_rt_clock T_MPIRUN
set +e
mpirun ${PREFIX_ARGS[@]+"${PREFIX_ARGS[@]}"} --hostfile "$HOSTFILE_OUT" -np "$NP" ${ROOT_ARGS[@]+"${ROOT_ARGS[@]}"} \
  ${MPIRUN_ARGS[@]+"${MPIRUN_ARGS[@]}"} ${IFACE_ARGS[@]+"${IFACE_ARGS[@]}"} \
  ${X_ARGS[@]+"${X_ARGS[@]}"} "$@"
rc=$?
set -e
hw_rt_clock T_JOB
# The end of the job: kept here first, for a worker this instance cannot tell to ask for;
# then to every worker, AT_ONCE at a time, each tried TELL_TRIES times. A worker not told
# asks for the record, or ends by itself (FIRST_GONE_AFTER, WORKER_TIMEOUT); this instance
# names it in its last line.
keep_end "$rc"
TELL_TRIES=3
TELL_OVER=()  # the shared connection, never a new one that would outlive this script
if [ "${#SHARE[@]}" -gt 0 ]; then TELL_OVER=("${SHARE[@]}" -o ControlMaster=no); fi
# shellcheck disable=SC2317,SC2329  # par runs it
tell() {
  local h=$1 try
  for ((try = 1; ; try++)); do
    if hw_rt_end_tell "$h" "$PORT" "$rc" "$HW_RT_END_TIME" "$RUN_REL" ${TELL_OVER[@]+"${TELL_OVER[@]}"}; then
      # the shared connection's work is done: it ends now, not when ControlPersist runs out
      if [ "${#SHARE[@]}" -gt 0 ]; then ssh "${SHARE[@]}" -O exit -p "$PORT" "$h" 2>/dev/null || true; fi
      return 0
    fi
    if [ "$try" -ge "$TELL_TRIES" ]; then return 1; fi
    log "could not tell $h that the job ended (try $try of $TELL_TRIES), next in $((try * 2))s"
    sleep $((try * 2))
  done
}
par "$AT_ONCE" tell "${NAMES[@]:1}"
hw_rt_clock T_TOLD
secs() { printf '%d.%ds' $((($2 - $1) / 1000000)) $((($2 - $1) / 100000 % 10)); }
log "times: the workers' sshd ready after $(secs "$T_START" "$T_READY")," \
  "mpirun started after $(secs "$T_START" "$T_MPIRUN") and ran $(secs "$T_MPIRUN" "$T_JOB")," \
  "telling $((N - 1)) workers took $(secs "$T_JOB" "$T_TOLD"); $(secs "$T_START" "$T_TOLD") in all"
if [ "${#PAR_FAILED[@]}" -gt 0 ]; then
  # The job's own failure is its status; a job that ran well exits 3 all the same, so that
  # whoever watches this instance learns that workers wait on (until FIRST_GONE_AFTER or
  # WORKER_TIMEOUT ends them).
  status=$rc
  if [ "$rc" -eq 0 ]; then rc=3; fi
  log "the job ended with status $status; not told after $TELL_TRIES tries (exit $rc): ${PAR_FAILED[*]}"
fi
exit "$rc"
'''

_TORCH = r'''
# torchrun's instances each run this script in their own environment: nothing is passed on.
if [ -n "${FORWARD_ENV:-}" ]; then
  log "FORWARD_ENV is not used: torchrun instances each run this script in their own environment"
fi
# torchrun's rendezvous: MASTER_ADDR, else PET_MASTER_ADDR (Kubeflow's TrainJob sets only
# the PET_ names, torchrun's own: it reads PET_<OPTION>), else the first host; the port
# likewise, else 29500. Each value set is checked before anything waits or starts.
MASTER=$FIRST MPORT=29500
for v in PET_MASTER_ADDR MASTER_ADDR; do  # the later wins
  hw_rt_address "$v" "${!v:-}" || die "$HW_RT_ERROR"
  if [ -n "$HW_RT_VALUE" ]; then MASTER=$HW_RT_VALUE; fi
done
for v in PET_MASTER_PORT MASTER_PORT; do
  hw_rt_port "$v" "${!v:-}" || die "$HW_RT_ERROR"
  if [ -n "$HW_RT_VALUE" ]; then MPORT=$HW_RT_VALUE; fi
done
for h in "${NAMES[@]}"; do
  if [ "$h" != "$ME" ]; then hw_rt_wait "$h" "$WAIT_TRIES" || die "$HW_RT_ERROR"; fi
done
NPROC=${NPROC_PER_NODE:-} NPROC_FROM=NPROC_PER_NODE
if [ -z "$NPROC" ] && [ -n "${PET_NPROC_PER_NODE:-}" ]; then
  NPROC=$PET_NPROC_PER_NODE NPROC_FROM=PET_NPROC_PER_NODE
  # torchrun's words go to torchrun as they are (auto: the accelerators, else the CPUs): it
  # would read PET_NPROC_PER_NODE the same way, and a PyTorchJob's nprocPerNode defaults to
  # auto. Anything else is refused here, not in torchrun's traceback.
  case $NPROC in
    auto|cpu|gpu|xpu) ;;
    *) [[ $NPROC =~ ^[0123456789]{1,6}$ ]] ||
         die "PET_NPROC_PER_NODE=$NPROC is not a number (digits 0-9 only) or auto, cpu, gpu, xpu" ;;
  esac
fi
if [ -z "$NPROC" ]; then
  NPROC=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true) NPROC_FROM="the GPUs here"
  if [ "${NPROC:-0}" -lt 1 ]; then NPROC=1 NPROC_FROM="no GPU here"; fi
fi
if [[ $NPROC =~ ^0+$ ]]; then die "$NPROC_FROM=$NPROC: torchrun needs 1 process or more"; fi
# The plan's interface and RoCE GID index are the planning instance's. Each instance checks
# them against its own: a NIC named otherwise here (ens6 for ens5) gives the route's to the
# master (or, on the master, to the next host); a GID index that is not this port's RoCE v2
# IPv4 GID gives this instance's own.
# A value the environment set is the user's: it is used as it is.
env_kept() { [[ " ${ENV_KEPT[*]} " == *" $1 "* ]]; }
FIX=()
for v in GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME; do
  if [ -n "${!v:-}" ] && ! env_kept "$v"; then FIX+=("$v"); fi
done
if [ "${#FIX[@]}" -gt 0 ]; then
  want=${!FIX[0]}
  want=${want#=}
  if [ ! -e "${HW_RT_SYSFS:-/sys}/class/net/$want" ]; then
    peer=$MASTER
    if [ "$RANK" = 0 ] && [ "$N" -gt 1 ]; then peer=${NAMES[1]}; fi
    hw_rt_route_dev "$peer"
    if [ -n "$HW_RT_DEV" ]; then
      for v in "${FIX[@]}"; do
        if [ "$v" = NCCL_SOCKET_IFNAME ]; then export NCCL_SOCKET_IFNAME="=$HW_RT_DEV"
        else export GLOO_SOCKET_IFNAME=$HW_RT_DEV; fi
      done
      log "socket interface $HW_RT_DEV here (the route to $peer at $HW_RT_ADDR), not the plan's $want"
    else
      unset "${FIX[@]}"
      log "no interface $want here and no route to $peer names one: NCCL and gloo choose"
    fi
  fi
fi
if [ -n "${NCCL_IB_GID_INDEX:-}" ] && [ -n "${NCCL_IB_HCA:-}" ] && ! env_kept NCCL_IB_GID_INDEX; then
  gid="" same=1
  IFS=, read -r -a devs <<< "${NCCL_IB_HCA#=}"
  for d in "${devs[@]}"; do
    hw_rt_roce_gid "${d%%:*}" "${d#*:}"
    if [ -z "$gid" ]; then gid=$HW_RT_GID; elif [ "$gid" != "$HW_RT_GID" ]; then same=0; fi
  done
  if [ "$same" = 1 ] && [ -n "$gid" ]; then
    if [ "$gid" != "$NCCL_IB_GID_INDEX" ]; then
      log "NCCL_IB_GID_INDEX $gid here (this instance's RoCE v2 IPv4 GID), not the plan's $NCCL_IB_GID_INDEX"
      export NCCL_IB_GID_INDEX=$gid
    fi
  else
    log "NCCL_IB_GID_INDEX unset: this instance's ports have no one RoCE v2 IPv4 GID index (NCCL 2.21 and later choose each port's)"
    unset NCCL_IB_GID_INDEX
  fi
fi
# 'python3 train.py': torchrun runs the script with the Python it belongs to; an explicit
# interpreter (/opt/conda/bin/python) is honoured by running torch.distributed.run with it.
__TORCH_PROGRAM_SH__
torch_program "$@" || die "$TORCH_PROGRAM_ERROR"
if [ -n "$TORCH_PY" ]; then TORCHRUN=("$TORCH_PY" -m torch.distributed.run)
elif command -v torchrun >/dev/null 2>&1; then TORCHRUN=(torchrun)
else TORCHRUN=(python3 -m torch.distributed.run); fi
ARGS=(--nnodes="$N" --node-rank="$RANK" --nproc-per-node="$NPROC" --master-addr="$MASTER" --master-port="$MPORT")
printf -v SHOWN ' %q' "$@"
log "torchrun node $RANK of $N, master $MASTER:$MPORT, --nproc-per-node $NPROC ($NPROC_FROM):$SHOWN"
exec "${TORCHRUN[@]}" "${ARGS[@]}" "${TORCH_PROGRAM[@]}"
'''


def _runtime_text() -> str:
    """recipes/runtime.sh as the script embeds it: whole, but for its shellcheck directive
    (the script's own first line says bash)."""
    lines = runtime.library().splitlines()
    if lines and lines[0].startswith("# shellcheck shell="):
        lines = lines[1:]
    return "\n".join(lines).strip("\n")


def _words(args: List[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


def _forward_lines(job: Job) -> List[str]:
    """The job's environment on every rank, as the script's data (hpcwizard.job.FORWARD):
    mpirun -x of each name set where the script runs; torchrun's instances each run the
    script in their own environment."""
    if not job.mpi:
        return [comment(_("The job's environment: torchrun starts every process of this "
                          "instance from this script's\nenvironment. Each instance runs the "
                          "script in its own: activate the same venv (or conda\nenvironment) "
                          "and set OMP_NUM_THREADS and the like on every instance."))]
    return [
        comment(_("The job's environment on every rank (mpirun -x, each name set where this "
                  "script runs):\n{names},\nthe plan's NCCL_*/UCX_*, and the names in {var} "
                  "(blanks or commas between them,\ne.g. {var}=\"HF_HOME WANDB_MODE\"). An "
                  "Open MPI outside /usr/bin gets --prefix from the\nmpirun on PATH, so that "
                  "the other instances find its orted/prted.").format(
                      names=FORWARD.listed(), var=FORWARD.variable)),
        "FORWARD_NAMES=(" + " ".join(n for n in FORWARD.names if n not in job.passed) + ")",
        "FORWARD_PREFIXES=(" + " ".join(FORWARD.prefixes) + ")",
    ]


def _forward_usage(job: Job) -> str:
    """The usage's lines on the job's environment (English, as the rest of the usage)."""
    if not job.mpi:
        text = ("The job's environment: torchrun's processes here inherit this script's; each "
                "instance runs the script in its own, so activate the same venv and set "
                "OMP_NUM_THREADS and the like on every instance.")
    else:
        text = (f"The job's environment on every rank (mpirun -x): {FORWARD.rule()} "
                f"(e.g. {FORWARD.variable}=\"HF_HOME WANDB_MODE\"). An Open MPI outside "
                "/usr/bin gets --prefix from the mpirun on PATH, so that the other instances "
                "find its orted/prted.")
    return textwrap.fill(text, width=90, subsequent_indent="  ")


def render(job: Job) -> str:
    env = checked_env(job)
    out: List[str] = [
        "#!/usr/bin/env bash",
        comment(_("Written by hpcwizard {version}: the per-instance launch script. Run the same\n"
                  "command on every instance of the job:").format(version=__version__)),
        f"#   bash {LAUNCH_NAME} [--hosts a,b,c | --hostfile FILE] [--] PROGRAM [ARGS...]",
        f"#   bash {LAUNCH_NAME} -- python train.py --lr 0.1",
        f"# framework={job.framework} network={job.network}"
        + (f" ssh_port={job.ssh_port}" if job.mpi else "")
        + f" user={job.user}",
    ]
    if job.recommended == "preset" and job.preset_image:
        out.append(comment(_("For the preset image {image}: sshd is started as whoever runs "
                             "this script (root: the system sshd; a user: sshd -f "
                             "~/.sshd_config).").format(image=job.preset_image)))
    elif job.os_label:
        out.append(comment(_("Planned on: {os}").format(os=job.os_label)))
    out.append(comment(_("'bash {script} --help' lists the host sources and settings.").format(
        script=LAUNCH_NAME)))
    if job.host_keys_off:
        out.append(comment(_("WARNING: host keys are not checked (--host-keys off).")))
    out.append("set -euo pipefail")
    out.append("")
    out.append(f"PORT={job.ssh_port}")
    out.append(comment(_("The plan's environment for the job (also passed to every rank with "
                         "mpirun -x).")))
    out += planned_env_lines(env)
    out.append(comment(_("Passed to the ranks with mpirun -x (those MPIRUN_ARGS does not pass "
                         "already).")))
    out.append("LAUNCH_ENV=(" + " ".join(shlex.quote(k) for k, _v in env if k not in job.passed) + ")")
    if job.mpi:
        out.append(comment(_("mpirun's arguments for Open MPI 4 and for Open MPI 5, whose "
                             "runtime (PRRTE)\nnames them differently: 'mpirun --version' "
                             "picks one when the script runs.")))
    out.append("MPIRUN_ARGS=(" + " ".join(shlex.quote(a) for a in mpirun_args(job)) + ")")
    if job.mpi:
        out.append("MPIRUN_ARGS_5=(" + " ".join(
            shlex.quote(a) for a in mpirun_args(job, 5)) + ")")
    out += _forward_lines(job)
    out.append(_BODY.strip("\n").replace("__OPS_FUNCTIONS__", ops.functions(
        "_hw_say", "_hw_is_sshd", "_hw_sshd_pid", "_hw_sshd_exec")).replace(
        "__RUNTIME__", _runtime_text()))
    out.append((_MPI if job.mpi else _TORCH).rstrip("\n")
               .replace("__OMPI_VERSION_SH__", OMPI_VERSION_SH)
               .replace("__IFACE_ARGS_5__", " ".join(IFACE_ARGS_5))
               .replace("__IFACE_ARGS_4__", " ".join(IFACE_ARGS_4))
               .replace("__NO_CMA_ARGS_5__", _words(no_cma_args(5)))
               .replace("__NO_CMA_ARGS_4__", _words(no_cma_args(4)))
               .replace("__NO_CMA_UCX_TLS__", shlex.quote(NO_CMA_ENV["UCX_TLS"]))
               .replace("__TORCH_PROGRAM_SH__", TORCH_PROGRAM_SH))
    out.append("")
    text = "\n".join(out).replace("__FORWARD_USAGE__", _forward_usage(job))
    if not job.mpi:  # torchrun needs neither the mpirun settings nor sshd
        text = text.replace("LAUNCH_ENV=(", "# shellcheck disable=SC2034\nLAUNCH_ENV=(", 1)
        text = text.replace("MPIRUN_ARGS=(", "# shellcheck disable=SC2034\nMPIRUN_ARGS=(", 1)
        text = text.replace("\nPORT=", "\n# shellcheck disable=SC2034\nPORT=", 1)
    return text
