"""The shell functions that find and end a run's processes on any host (sent with each command: nothing is
installed there). tools/runs.py puts them in the wrapper, in status() and in stop().

A run's processes are the live (not zombie) ones that carry its marker ``MEDIC_RUN=<run folder>`` in their
environment (the wrapper is started with it, so the job, its workers and a daemon that called setsid inherit
it) and, while the wrapper itself is alive, those of the wrapper's process group or session (a worker whose
environment was replaced). Once the wrapper is gone its pid, and so that group id, may be a stranger's: then
the marker alone counts. A container's init may never reap orphans, so a zombie never counts. Without /proc
the group is all there is (``kill -SIG -PGID``: the one spelling dash and bash agree on).

- ``procs SIG G M``: send SIG to each process of the run (G: the wrapper's pid, or empty for the marker
  alone; M: the marker) but the calling shell; 0 if there was one. SIG 0 only asks.
- ``ours P M``: is P alive and carrying M (the run's wrapper, not a stranger with its old pid)?
- ``ingroup G``: is a process of group G alive (the run's command may still be going)?
- ``reap G M SECONDS``: TERM the run's processes, KILL those left after SECONDS; 0 when KILL was needed.
"""

from __future__ import annotations

# Shell variables are global: the functions' own start with "_". One grep reads every environment, so
# there is no fork per process.
PROCS_SH = r"""procs() {
  _sig=$1 _g=$2 _m=$3 _hit=1
  [ -d /proc/self ] || { [ -n "$_g" ] && kill -"$_sig" "-$_g" 2>/dev/null; return; }
  _marked=" $(grep -lzxF -e "$_m" /proc/[0-9]*/environ 2>/dev/null | tr '\n' ' ') "
  for _f in /proc/[0-9]*/stat; do
    _p=${_f#/proc/}; _p=${_p%/stat}
    [ "$_p" = "$$" ] && continue
    read -r _s 2>/dev/null < "$_f" || continue
    set -- ${_s##*) }
    [ "$1" = Z ] && continue
    case "$_marked" in
      *" /proc/$_p/environ "*) ;;
      *) [ -n "$_g" ] && { [ "$3" = "$_g" ] || [ "$4" = "$_g" ]; } || continue ;;
    esac
    _hit=0
    [ "$_sig" = 0 ] && return 0
    kill -"$_sig" "$_p" 2>/dev/null
  done
  return $_hit
}
ours() {
  [ -n "$1" ] || return 1
  [ -d /proc/self ] || { kill -0 "$1" 2>/dev/null; return; }
  grep -qzxF -e "$2" "/proc/$1/environ" 2>/dev/null
}
ingroup() {
  [ -d /proc/self ] || { kill -0 "-$1" 2>/dev/null; return; }
  for _f in /proc/[0-9]*/stat; do
    read -r _s 2>/dev/null < "$_f" || continue
    set -- "$1" ${_s##*) }
    [ "$4" = "$1" ] && [ "$2" != Z ] && return 0
  done
  return 1
}
reap() {
  procs TERM "$1" "$2" || return 1
  _end=$(( $(date +%s) + $3 + 1 ))  # whole seconds (a scan takes time too): at least $3 of them
  while procs 0 "$1" "$2"; do
    [ "$(date +%s)" -lt $_end ] || break
    sleep 0.1
  done
  procs 0 "$1" "$2" || return 1
  _j=0; while procs KILL "$1" "$2" && [ $_j -lt 5 ]; do sleep 0.1; _j=$((_j+1)); done  # and what they forked
  return 0
}
"""
