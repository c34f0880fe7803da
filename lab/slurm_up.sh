#!/bin/bash
# Start a one-node Slurm cluster on 127.0.0.1 without systemd (Debian's slurm-wlm 22.05; see the README's
# "Slurm" section). Installs slurmctld/slurmd/slurm-client (and munge) first when they are missing. Run as root.
# Idempotent: a cluster this script started and that still answers is left as it is.
# MEDIC_SLURM_DIR: where all runtime state lives (default /tmp/medic-slurm); slurm_down.sh stops it.
set -euo pipefail
S=${MEDIC_SLURM_DIR:-/tmp/medic-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by medic lab/slurm_up.sh"
CPUS=${MEDIC_SLURM_CPUS:-4}   # more than the cores there are is fine with config_overrides: jobs share them

if ! command -v slurmctld >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  echo "installing slurmctld slurmd slurm-client" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi
if [ -e $CONF ] && ! grep -qxF "$MARK" $CONF; then
  echo "$CONF exists and was not written by medic: not touching it" >&2; exit 1
fi
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
up() { case "$(timeout 5 sinfo -h -o %T 2>/dev/null)" in idle|mixed|allocated|completing) return 0 ;; esac; return 1; }
mkdir -p /etc/slurm
cat > $CONF.tmp <<EOC
$MARK
ClusterName=medic
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
# cred_expire: a requeued job waits this long (default 120 s) before it may start again
AuthInfo=socket=$S/munge/munge.socket.2,cred_expire=10
SlurmctldPort=${MEDIC_SLURMCTLD_PORT:-6817}
SlurmdPort=${MEDIC_SLURMD_PORT:-6818}
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
MailProg=/usr/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# no slurmdbd here: \`sacct -c\` reads finished jobs from this file
JobCompType=jobcomp/filetxt
JobCompLoc=$S/jobcomp.log
MinJobAge=300
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1000 State=UNKNOWN
# a higher tier on the same node, as on a shared cluster: a job there cancels (PREEMPTED) what runs in debug
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2
EOC
if alive $S/slurmctld.pid && alive $S/slurmd.pid && up && cmp -s $CONF.tmp $CONF; then
  rm -f $CONF.tmp
  exit 0  # already up (a dead slurmctld would make sinfo retry for seconds: its pid is asked first)
fi
if { alive $S/slurmctld.pid || alive $S/slurmd.pid; } && ! cmp -s $CONF.tmp $CONF; then
  "$(dirname "$0")/slurm_down.sh"  # started with another slurm.conf (an older medic's): start it afresh
fi

mkdir -p $S/state $S/spool $S/log
install -d -o munge -g munge -m 711 $S/munge      # munged insists on o+x on its socket folder
if [ ! -s $S/munge/munge.key ]; then
  mungekey --create --keyfile=$S/munge/munge.key
  chown munge:munge $S/munge/munge.key; chmod 600 $S/munge/munge.key
fi
mv -f $CONF.tmp $CONF
M="--socket=$S/munge/munge.socket.2"
if ! munge -n $M >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged $M --key-file=$S/munge/munge.key \
    --pid-file=$S/munge/munged.pid --log-file=$S/munge/munged.log --seed-file=$S/munge/munged.seed
fi
for i in $(seq 50); do munge -n $M >/dev/null 2>&1 && break; sleep 0.1; done
alive $S/slurmctld.pid || /usr/sbin/slurmctld
alive $S/slurmd.pid || /usr/sbin/slurmd -N localhost
for i in $(seq 150); do up && exit 0; sleep 0.2; done
echo "slurm did not come up (logs under $S/log)" >&2; tail -n 20 $S/log/*.log >&2; exit 1
