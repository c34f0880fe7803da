#!/bin/bash
# Stop what slurm_up.sh started, by pid, leaving nothing running. Jobs are cancelled first: a job's
# slurmstepd outlives slurmd. The state folder is removed too, so the next start has no old jobs.
S=${MEDIC_SLURM_DIR:-/tmp/medic-slurm}
[ -d $S ] || exit 0
if command -v scancel >/dev/null && [ -n "$(squeue -h 2>/dev/null)" ]; then
  scancel --user="$(id -un)" 2>/dev/null || true
  for i in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
fi
pids=""  # read before kill: the daemons delete their pid files on exit
for f in $S/slurmd.pid $S/slurmctld.pid $S/munge/munged.pid; do
  [ -s $f ] && kill -0 "$(cat $f)" 2>/dev/null && pids="$pids $(cat $f)"
done
[ -n "$pids" ] && kill $pids
for p in $pids; do for i in $(seq 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; done
for p in $pids; do kill -0 $p 2>/dev/null && kill -9 $p; done
rm -rf $S/state $S/spool $S/jobcomp.log
exit 0
