#!/bin/bash
# Rendered by slurmkit for site local, cluster alpha, partition gpu (template single).
#SBATCH --job-name=eval
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=h100:2
#SBATCH --time=00:30:00
#SBATCH --output=slurmkit-eval-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Collective library settings for the ethernet fabric of partition gpu.
export NCCL_IB_DISABLE=1
export NCCL_SOCKET_IFNAME=lo
export GLOO_SOCKET_IFNAME=lo

# Energy: each node's NVIDIA GPUs' energy counters (NVML's nvmlDeviceGetTotalEnergyConsumption, in mJ
# since the driver loaded) are read at the start of the job's work and again at its end, one short
# step with one task per node each time, into the directory `slurmkit eff` reads (the site's
# energy.nvml_samples): one JSON file per node and phase under JOB/ATTEMPT/.  A node where NVML
# cannot be read writes why instead, and eff says so.  The end is read on the way out whatever
# ended the script (its status is kept); a job killed outright (NODE_FAIL, a kill past the time
# limit) has no end and eff falls back to the site's power model for it, saying so.
slurmkit_energy_job=$SLURM_JOB_ID
[[ -z ${SLURM_ARRAY_TASK_ID:-} ]] || slurmkit_energy_job=${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID
slurmkit_energy_dir=/shared/energy/$slurmkit_energy_job/${SLURM_RESTART_COUNT:-0}
slurmkit_energy_code='import json, os, socket, sys, time
phase, directory = sys.argv[1], sys.argv[2]
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
# The GPUs of this job on this node, as Slurm numbers them (its gres index, the device minor number
# where gres.conf names /dev/nvidiaN).
record = {"phase": phase, "node": node, "time": time.time(), "gpus": [], "error": None,
          "job_gpus": os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS")}
try:
    import pynvml
    pynvml.nvmlInit()
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpu = {"index": index, "minor": None, "energy_mj": None, "error": None}
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    gpu["minor"] = int(pynvml.nvmlDeviceGetMinorNumber(handle))
                except Exception:
                    pass
                gpu["energy_mj"] = int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            except Exception as exc:
                gpu["error"] = "%s: %s" % (type(exc).__name__, exc)
            record["gpus"].append(gpu)
    finally:
        pynvml.nvmlShutdown()
except Exception as exc:
    record["error"] = "%s: %s" % (type(exc).__name__, exc)
os.makedirs(directory, exist_ok=True)
path = os.path.join(directory, "%s.%s.json" % (node, phase))
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(path + ".tmp", path)'
slurmkit_energy_sample() {
    # Never fails the job: energy is a report, not the work.
    srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --cpus-per-task=1 \
        --overlap --kill-on-bad-exit=0 --job-name=slurmkit-energy \
        python3 -c "$slurmkit_energy_code" "$1" "$slurmkit_energy_dir" \
        || echo "slurmkit: the GPUs' energy could not be read at the job's $1 (srun exited $?)" >&2
}
slurmkit_energy_sample start || true
trap 'slurmkit_energy_sample end || true' EXIT

# slurmkit_supervise "PASS ON" "OUTLIVE" COMMAND [ARG...]: run COMMAND (a program, or a function of
# this script) as a child of this shell and wait until it has ended, whatever signals come meanwhile.
# A signal of PASS ON is passed on to the child; one of OUTLIVE is only outlived (the launcher
# signals the child itself: passing it on as well would deliver it twice).  Then slurmkit_rc is the
# child's status (128+N: killed by signal N) and slurmkit_signals the PASS ON signals that came.
slurmkit_supervise() {
    local pass=$1 outlive=$2 sig
    shift 2
    slurmkit_child= slurmkit_pending= slurmkit_signals=
    # The traps come before the child starts: a signal in between would otherwise end this shell
    # and lose the child's status.  One that comes before the child has a pid waits for it.
    for sig in $pass; do
        trap "slurmkit_on_signal $sig" "$sig"
    done
    for sig in $outlive; do
        trap 'slurmkit_woken=1' "$sig"
    done
    # A command bash starts with & ignores SIGINT and SIGQUIT (no job control): not the child.
    if declare -F "$1" >/dev/null; then
        (trap - INT QUIT $pass $outlive; "$@") &
    else
        (trap - INT QUIT $pass $outlive; exec "$@") &
    fi
    slurmkit_child=$!
    for sig in $slurmkit_pending; do
        kill -s "$sig" "$slurmkit_child" 2>/dev/null || true
    done
    # wait returns early (status > 128) when a trap ran: then wait again.  Only wait knows the
    # child's status: bash reaps a child that ends while the shell is not waiting (a program that
    # fails at once), so asking `kill -0` whether it still runs would lose its exit status.
    while :; do
        slurmkit_woken=0 slurmkit_rc=0
        wait "$slurmkit_child" || slurmkit_rc=$?
        (( slurmkit_woken && slurmkit_rc > 128 )) || break
    done
    [[ -z $pass$outlive ]] || trap - $pass $outlive
}
slurmkit_on_signal() {
    slurmkit_woken=1 slurmkit_signals+=" $1"
    if [[ -z $slurmkit_child ]]; then
        slurmkit_pending+=" $1"
    else
        kill -s "$1" "$slurmkit_child" 2>/dev/null || true
    fi
}
# slurmkit_end_as STATUS: end this shell the way its child ended: killed by the same signal (a
# launcher, torchrun or Slurm, then reports the signal), else with the same exit status.
slurmkit_end_as() {
    case $(($1 - 128)) in
        1|2|3|4|6|7|8|9|10|11|12|13|14|15|24|25|26|27|29|30|31)   # signals whose default is to end
            trap - $(($1 - 128))
            kill -s $(($1 - 128)) "$BASHPID" 2>/dev/null || true ;;
    esac
    exit "$1"
}
# The program runs as a child of this script, not in its place (exec), so that the GPUs' energy can
# be read after it: what Slurm sends the batch shell alone (--signal=B:USR1, scancel --batch) is
# passed on to it, what Slurm sends every process of the job (TERM at the time limit, scancel) it
# gets itself, and the script ends as the program did (its status, or the signal that killed it).
slurmkit_energy_run() {
    slurmkit_supervise "USR1 USR2" "TERM INT HUP QUIT" "$@"
    slurmkit_end_as "$slurmkit_rc"
}
slurmkit_energy_run /home/me/venvs/torch/bin/python eval.py
# end of slurmkit job script
