#!/bin/bash
# Rendered by slurmkit for site example-infiniband, cluster hopper, partition gpu (template torchrun).
#SBATCH --job-name=train
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=h100:8
#SBATCH --time=04:00:00
#SBATCH --switches=1@00:30:00
#SBATCH --account=ml-research
#SBATCH --qos=normal
#SBATCH --no-requeue
#SBATCH --signal=B:USR1@120
#SBATCH --output=slurmkit-train-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Environment modules named by the site.
module load cuda/12.4
module load nccl/2.21.5
module load hpcx/2.19

# Site setup lines.
source /opt/venvs/torch-2.4/bin/activate
export HF_HOME=/scratch/$USER/hf

# Collective library settings for the infiniband fabric of partition gpu.
export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1
export NCCL_SOCKET_IFNAME==ib0
export GLOO_SOCKET_IFNAME=ib0
export NCCL_IB_TIMEOUT=22
export NCCL_IB_RETRY_CNT=10
export NCCL_NET_GDR_LEVEL=PHB

# Under the slurmkit requeue daemon: where checkpoints go, this attempt, the checkpoint to resume.
export SLURMKIT_CHECKPOINT_DIR=/scratch/me/ckpt/run1
export SLURMKIT_ATTEMPT=2
export SLURMKIT_CLUSTER=hopper
# SIGUSR1 comes before the time limit (--signal=B:USR1): pass it to the program so it can save,
# and exit 75 ("saved, resume me") when the program ended after it.  torchrun forwards it to its
# workers when asked to handle it: --signals-to-handle, read from PET_SIGNALS_TO_HANDLE (its
# TORCHELASTIC_ variable, which older releases read, is overwritten by that option's default).
export PET_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1
export TORCHELASTIC_SIGNALS_TO_HANDLE=$PET_SIGNALS_TO_HANDLE
# torchrun exits 1 and srun --kill-on-bad-exit 143 when one worker fails, whatever that worker's
# status: the daemon would never see a transient code.  So each worker of the srun and torchrun
# templates runs under slurmkit_worker, which writes how it ended ("<time in us> <status> <rank>
# <node>") into this job's step directory (in the checkpoint directory, which every node shares),
# and slurmkit_run_step exits with the status of the worker that failed first, by time (the ones
# killed after it, by torchrun or srun, come later).
export SLURMKIT_STEP_DIR="$SLURMKIT_CHECKPOINT_DIR/.slurmkit/steps/${SLURM_JOB_ID:-0}"
# The program's heartbeat (slurmkit.checkpoint.heartbeat): with a hang timeout the daemon ends a
# job whose heartbeat and checkpoints stop moving (a hung rank), and restarts it.
export SLURMKIT_HEARTBEAT="$SLURMKIT_CHECKPOINT_DIR/.slurmkit/heartbeat/${SLURM_JOB_ID:-0}"
mkdir -p -- "${SLURMKIT_HEARTBEAT%/*}" 2>/dev/null || true
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
slurmkit_worker() {
    local t rank record
    # The launchers signal the worker itself (slurmstepd every process of the task, torchrun
    # 2.2+ the worker's process group): the wrapper only outlives those signals to see how
    # the worker ended.
    slurmkit_supervise "" "USR1 USR2 TERM INT HUP QUIT" "$@"
    t=${EPOCHREALTIME:-}
    t=${t/[.,]/}
    [[ $t =~ ^[0-9]+$ ]] || t=$(date +%s%6N)
    rank=${RANK:-${SLURM_PROCID:-0}}
    record="$SLURMKIT_STEP_DIR/$rank.$BASHPID"
    { printf '%s %d %s %s\n' "$t" "$slurmkit_rc" "$rank" "${SLURMD_NODENAME:-$HOSTNAME}" >"$record.tmp" \
        && mv -f -- "$record.tmp" "$record"; } 2>/dev/null || true
    slurmkit_end_as "$slurmkit_rc"
}
export -f slurmkit_worker slurmkit_supervise slurmkit_on_signal slurmkit_end_as
slurmkit_first_failure() {
    # "status rank node" of the worker that failed first, from the step directory; nothing if none failed.
    local f t s r n first_t="" first=""
    for f in "$SLURMKIT_STEP_DIR"/*; do
        [[ -f $f ]] || continue
        read -r t s r n <"$f" 2>/dev/null || continue
        [[ $t =~ ^[0-9]+$ && $s =~ ^[0-9]+$ ]] || continue
        (( s != 0 )) || continue
        if [[ -z $first_t ]] || (( t < first_t )); then
            first_t=$t first="$s $r $n"
        fi
    done
    [[ -z $first ]] || echo "$first"
}
slurmkit_run_step() {
    local rc first
    # Only this attempt's records: an earlier attempt killed part-way (a node failure) left its own.
    rm -rf -- "${SLURMKIT_STEP_DIR%/*}" 2>/dev/null || true
    mkdir -p -- "$SLURMKIT_STEP_DIR" 2>/dev/null || true
    # USR1 (Slurm's warning before the time limit, also as the job starts) goes on to the step.
    slurmkit_supervise USR1 "" "$@"
    rc=$slurmkit_rc
    if (( rc != 0 )); then
        first=$(slurmkit_first_failure)
        if [[ -n $first ]]; then
            local status rank node
            read -r status rank node <<<"$first"
            if (( status != rc )); then
                echo "slurmkit: the step ended with status $rc; the first worker to fail (rank $rank on $node)" \
                    "exited $status: the job exits $status" >&2
                rc=$status
            fi
        fi
    fi
    rm -rf -- "$SLURMKIT_STEP_DIR" 2>/dev/null || true
    if [[ -n $slurmkit_signals ]] && (( rc != 0 )); then
        echo "slurmkit: the program ended after SIGUSR1 (status $rc); exit 75 so the daemon resumes it" >&2
        return 75
    fi
    return "$rc"
}

# Variables given with --env.
export WANDB_MODE=offline

# The job's steps run in image pytorch-25.01 (pyxis, /shared/images/nvidia+pytorch+25.01-py3.sqsh); this
# script stays on the host.  Each task first checks that it really is in the image, in the host's
# network, and sees the job's directories at their paths.
[[ -e /shared/images/nvidia+pytorch+25.01-py3.sqsh ]] || { echo "slurmkit: error: image pytorch-25.01 is not on node $SLURMD_NODENAME at /shared/images/nvidia+pytorch+25.01-py3.sqsh: copy it there or fix the site's containers.images" >&2; exit 1; }
command -v enroot >/dev/null || { echo "slurmkit: error: runtime pyxis needs enroot, which is not on node $SLURMD_NODENAME (PATH=$PATH)" >&2; exit 1; }
# What the in-image check compares with: the host's root mount and network namespace.
slurmkit_host_root=
while read -r slurmkit_a _ _ _ slurmkit_m _; do [[ $slurmkit_m == / ]] && slurmkit_host_root=$slurmkit_a; done </proc/self/mountinfo
slurmkit_host_net=$(readlink /proc/self/ns/net 2>/dev/null || true)
slurmkit_in_image='i=$1 h=$2 n=$3 w=$4; shift 3
where=${SLURMD_NODENAME:-${HOSTNAME:-this node}}
r=
if [[ -r /proc/self/mountinfo ]]; then
    while read -r a b c d m e; do [[ $m == / ]] && r=$a; done </proc/self/mountinfo
fi
if [[ -n $h && $r == "$h" ]]; then
    echo "slurmkit: error: the task on $where runs on the host, not in image $i: the runtime did not start it" \
        "(runtime oci: the node needs an oci.conf beside its slurm.conf)" >&2
    exit 1
fi
if [[ -n $n && -e /proc/self/ns/net ]] && command -v readlink >/dev/null && [[ $(readlink /proc/self/ns/net) != "$n" ]]; then
    echo "slurmkit: error: image $i runs in a network namespace of its own on $where, where the other nodes of the job" \
        "cannot reach it: run it in the network of the host (an OCI bundle: remove the network namespace from its" \
        "config.json)" >&2
    exit 1
fi
if [[ ${SLURM_STEP_NUM_TASKS:-1} != 1 && -z ${SLURM_PROCID:-} ]]; then
    echo "slurmkit: error: the runtime started the task in image $i without its own Slurm variables (SLURM_PROCID," \
        "SLURM_NODEID, SLURMD_NODENAME), so the $SLURM_STEP_NUM_TASKS tasks of the step cannot tell each other apart" \
        "(Slurm 22.05'"'"'s --container passes only those of srun): run one task, or a runtime that wraps the task" \
        "(charliecloud, pyxis, apptainer)" >&2
    exit 1
fi
while (($#)) && [[ $1 != -- ]]; do
    [[ -d $1 ]] || { echo "slurmkit: error: $1 is not in image $i on $where: mount it (--mount $1) or add it to the image" >&2; exit 1; }
    shift
done
shift
cd -- "$w" || exit 1
exec "$@"
'

# The address Slurm reaches each node of the job by (NodeAddr; one scontrol call for them all):
# every node can reach those, while node names need not resolve.  A node without one: its name.
export SLURMKIT_NODE_ADDRS=
while read -r slurmkit_line; do
    if [[ $slurmkit_line =~ ^NodeName=([^[:space:]]+).*[[:space:]]NodeAddr=([^[:space:]]+) ]]; then
        SLURMKIT_NODE_ADDRS+="${BASH_REMATCH[1]}=${BASH_REMATCH[2]} "
    fi
done < <(scontrol show node -o "$SLURM_JOB_NODELIST" 2>/dev/null)
slurmkit_node_addr() {
    local pair
    for pair in $SLURMKIT_NODE_ADDRS; do
        if [[ ${pair%%=*} == "$1" ]]; then echo "${pair#*=}"; return; fi
    done
    echo "slurmkit: warning: no NodeAddr of node $1 from scontrol; using its name" >&2
    echo "$1"
}
export -f slurmkit_node_addr
# Rendezvous on the first node, where this script runs.
MASTER_ADDR=$(slurmkit_node_addr "$SLURMD_NODENAME")
export MASTER_ADDR

# A port of the job's own, from its id within the site's range 29500-29999: two jobs whose
# first node is the same machine get different ports.  Skipped while some program listens there.
slurmkit_ports=500
for ((slurmkit_try = 0; slurmkit_try < slurmkit_ports; slurmkit_try++)); do
    MASTER_PORT=$((29500 + (SLURM_JOB_ID + slurmkit_try) % slurmkit_ports))
    (exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null || break
done
export MASTER_PORT

# torchrun as a module of the Python the command names, in the image, where torchrun itself says
# when that Python has no PyTorch.  In an image, PyTorch 2.2 or newer is taken for granted.
# A runtime that passes signals on to its container (runc, Apptainer's starter) while slurmstepd
# signals every process of the step delivers each signal to torchrun twice.  torchrun's agent takes
# the second, while it ends its workers with the first, for a death of its own, and ends them with
# SIGTERM: Slurm's USR1 before the time limit then saved nothing (Slurm 26.05, runc and Apptainer).
# So the launcher acts on one of each signal (torch's own handler, wrapped; a torch without it runs
# as it is).
slurmkit_python=python
slurmkit_torchrun_once='import runpy, sys
try:
    from torch.distributed.elastic.multiprocessing import api
    seen, handler = set(), api._terminate_process_handler
    def once(signum, frame):
        if signum not in seen:
            seen.add(signum)
            handler(signum, frame)
    api._terminate_process_handler = once
except (ImportError, AttributeError):
    pass
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)'
slurmkit_launcher=("$slurmkit_python" -c "$slurmkit_torchrun_once")
slurmkit_workers=(--no-python bash -c 'slurmkit_worker "$@"' slurmkit-worker "$slurmkit_python" -u)
slurmkit_endpoint="$MASTER_ADDR:$MASTER_PORT"
[[ $MASTER_ADDR != *:* ]] || slurmkit_endpoint="[$MASTER_ADDR]:$MASTER_PORT"  # an IPv6 address

# On every node (under srun): torchrun with the node's NodeAddr as its own address, which is where
# the workers find rank 0, and with the first node, and only that one, hosting the rendezvous
# store.  Said explicitly rather than guessed from addresses: if another program holds the port,
# this job fails at once instead of joining a stranger's store.
slurmkit_node_launcher() {
    PET_LOCAL_ADDR=$(slurmkit_node_addr "$SLURMD_NODENAME")
    export PET_LOCAL_ADDR PET_RDZV_CONF="is_host=$((SLURM_NODEID == 0))${PET_RDZV_CONF:+,$PET_RDZV_CONF}"
    exec "$@"
}
export -f slurmkit_node_launcher
# One launcher per node; each starts 8 worker(s).
slurmkit_run_step srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 --container-image=/shared/images/nvidia+pytorch+25.01-py3.sqsh --container-workdir="$PWD" --container-mounts=/scratch:/scratch,/datasets:/datasets:ro,/home/me/data:/data:ro,/scratch/me/ckpt/run1:/scratch/me/ckpt/run1,/dev/infiniband:/dev/infiniband,/sys/class/infiniband:/sys/class/infiniband:ro,"$PWD":"$PWD" --container-env=NCCL_IB_HCA,NCCL_SOCKET_IFNAME,GLOO_SOCKET_IFNAME,NCCL_IB_TIMEOUT,NCCL_IB_RETRY_CNT,NCCL_NET_GDR_LEVEL,WANDB_MODE,MASTER_ADDR,MASTER_PORT,SLURMKIT_NODE_ADDRS,SLURMKIT_CHECKPOINT_DIR,SLURMKIT_ATTEMPT,SLURMKIT_CLUSTER,SLURMKIT_STEP_DIR,SLURMKIT_HEARTBEAT,PET_SIGNALS_TO_HANDLE,TORCHELASTIC_SIGNALS_TO_HANDLE,HF_HOME \
    bash -c "$slurmkit_in_image" slurmkit-in-image pytorch-25.01 "$slurmkit_host_root" "$slurmkit_host_net" "$PWD" /scratch/me/ckpt/run1 -- bash -c 'slurmkit_node_launcher "$@"' torchrun \
    "${slurmkit_launcher[@]}" --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=8 \
    --rdzv-backend=c10d --rdzv-endpoint="$slurmkit_endpoint" --rdzv-id="$SLURM_JOB_ID" \
    "${slurmkit_workers[@]}" train.py
# end of slurmkit job script
