"""How a job's tasks start in its container image (``--image``): the image resolved through the
site's names, the mounts checked, the runtime's adapter (:mod:`slurmkit.containers.runtimes`)
asked for its srun options and command, and the in-job checks (:data:`IN_IMAGE_CHECK`) that
the task really runs in the image, in the host's network, and sees the job's directories.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, NamedTuple, Optional, Tuple

from slurmkit.errors import UsageError
from slurmkit.script.quoting import Trusted, in_double_quotes, shell_quote
from slurmkit.site.model import Cluster, Partition

if TYPE_CHECKING:   # the job spec is the renderer's, which imports this module
    from slurmkit.script.render import JobSpec


class ContainerLaunch(NamedTuple):
    """What the templates print to start each task in the job's image (see :func:`container_launch`)."""

    runtime: str
    image: str                               # as the user named it
    location: str                            # where the runtime finds it on the cluster
    srun: Trusted                            # srun options of the runtime, with a trailing space, or ""
    task: Trusted                            # the runtime's command and the in-image check, before each task
    prologue: Tuple[Trusted, ...]            # batch-script lines (on the host) before the first step


# Variables the templates set on the host that the program in the image reads (besides the fabric's
# and the --env ones): the rendezvous of the srun and torchrun templates, and the requeue daemon's.
# Launchers that start tasks from the host (the batch script's side), never from inside an image.
_HOST_LAUNCHERS = ("srun", "salloc", "sbatch", "mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun")
_RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "SLURMKIT_NODE_ADDRS")
_REQUEUE_VARIABLES = ("SLURMKIT_CHECKPOINT_DIR", "SLURMKIT_ATTEMPT", "SLURMKIT_CLUSTER", "SLURMKIT_STEP_DIR",
                      "SLURMKIT_HEARTBEAT", "PET_SIGNALS_TO_HANDLE", "TORCHELASTIC_SIGNALS_TO_HANDLE")

# Runs first in the image, before the task (as `bash -c "$slurmkit_in_image" slurmkit-in-image IMAGE
# HOST_ROOT HOST_NET WORKDIR [DIR...] -- TASK...`): the task must really be in the image (its root is
# another mount than the host's: Slurm runs a --container job on the host when the node has no
# oci.conf), in the host's network (a private one cuts the rendezvous), with its own Slurm variables
# where the step has several tasks (Slurm 22.05's --container passes only srun's), and see the job's
# directories at their paths; it starts the task in the job's working directory.
IN_IMAGE_CHECK = r"""i=$1 h=$2 n=$3 w=$4; shift 3
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
        "(Slurm 22.05's --container passes only those of srun): run one task, or a runtime that wraps the task" \
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
"""


def container_launch(cluster: Cluster, partition: Partition, spec: JobSpec, template_name: str,
                     fabric_env: Dict[str, str]) -> Optional[ContainerLaunch]:
    """How the job's tasks start in its image on ``partition`` (None without ``--image``): the image
    resolved through the site's names, the mounts checked, the runtime's adapter asked, and the
    in-job checks.  A runtime that cannot do what the job asks is a UsageError naming it."""
    if spec.image is None:
        if spec.mounts:
            raise UsageError("--mount applies to jobs in a container image: add --image NAME")
        return None
    from slurmkit.containers import catalog, grammar, runtimes

    launcher = os.path.basename(spec.command[0]) if spec.command else ""
    if launcher in _HOST_LAUNCHERS:
        raise UsageError("with --image the command runs inside the image, where Slurm's and MPI's launchers are "
                         "not: leave %r out (slurmkit's templates start the tasks: torchrun one per node, srun one "
                         "per GPU; an MPI program runs under template srun through Slurm's PMI)" % launcher)
    settings = partition.containers
    try:
        location = catalog.resolve(settings, spec.image, cluster.name, partition.name)
    except catalog.ImageRefusal as exc:
        raise UsageError("--image: %s" % exc) from None
    mounts: Dict[str, object] = {}
    for text, source in [(m, "the site's containers.mounts") for m in settings.mounts] + \
                        [(m, "--mount") for m in spec.mounts]:
        try:
            mount = grammar.parse_mount(text)
        except ValueError as exc:
            raise UsageError("%s: %s" % (source, exc)) from None
        mounts[mount.target] = mount          # the user's over the site's, by target
    must_see = ["$PWD"]
    if spec.checkpoint_dir is not None:
        must_see.append(spec.checkpoint_dir)
        if settings.runtime != "oci" and not any(t == spec.checkpoint_dir for t in mounts):
            mounts[spec.checkpoint_dir] = grammar.Mount(spec.checkpoint_dir, spec.checkpoint_dir)
    # Exactly the variables the script sets (a runtime told to pass an unset one may set it empty).
    env = list(fabric_env) + list(spec.env)
    if template_name != "single":
        env += _RENDEZVOUS_VARIABLES
    if spec.checkpoint_dir is not None:
        env += _REQUEUE_VARIABLES + (("SLURMKIT_RESUME_FROM",) if spec.resume_from else ())
    env += [name for name in settings.env if name not in env]
    request = runtimes.Request(image=location, mounts=tuple(mounts.values()), env=tuple(dict.fromkeys(env)),
                               accelerator=partition.accelerator,
                               rdma=partition.fabric.type in ("infiniband", "roce"), options=settings.options)
    try:
        wrapped = runtimes.wrap(settings.runtime, request)
    except runtimes.RuntimeRefusal as exc:
        raise UsageError("%s (cluster %s, partition %s)" % (exc, cluster.name, partition.name)) from None
    srun = runtimes.words_text(wrapped.srun_options, shell_quote)
    checked = " ".join('"$PWD"' if d == "$PWD" else shell_quote(d) for d in must_see)
    task = "%sbash -c \"$slurmkit_in_image\" slurmkit-in-image %s \"$slurmkit_host_root\" \"$slurmkit_host_net\" %s --" % (
        runtimes.words_text(wrapped.prefix, shell_quote) + " " if wrapped.prefix else "", shell_quote(spec.image), checked)
    prologue = ['export USER="${USER:-$(id -un)}"'] if wrapped.needs_user else []
    if grammar.is_path(location):
        prologue.append('[[ -e %s ]] || { echo "slurmkit: error: image %s is not on node $SLURMD_NODENAME at %s: '
                        'copy it there or fix the site\'s containers.images" >&2; exit 1; }'
                        % (shell_quote(location), in_double_quotes(spec.image), in_double_quotes(location)))
    if wrapped.bind_targets and grammar.is_path(location):
        prologue.append(_bind_target_check(wrapped, spec.image, location))
    if wrapped.binary:
        prologue.append('command -v %s >/dev/null || { echo "slurmkit: error: runtime %s needs %s, which is not on '
                        'node $SLURMD_NODENAME (PATH=$PATH)" >&2; exit 1; }'
                        % (shell_quote(wrapped.binary), settings.runtime, wrapped.binary))
    prologue += [
        "# What the in-image check compares with: the host's root mount and network namespace.",
        "slurmkit_host_root=",
        "while read -r slurmkit_a _ _ _ slurmkit_m _; do [[ $slurmkit_m == / ]] && slurmkit_host_root=$slurmkit_a; "
        "done </proc/self/mountinfo",
        "slurmkit_host_net=$(readlink /proc/self/ns/net 2>/dev/null || true)",
        "slurmkit_in_image=" + shell_quote(IN_IMAGE_CHECK)]
    return ContainerLaunch(runtime=settings.runtime, image=spec.image, location=location,
                           srun=Trusted(srun + " " if srun else ""), task=Trusted(task),
                           prologue=tuple(Trusted(line) for line in prologue))


def _bind_target_check(wrapped, image: str, location: str) -> str:
    """One line of the batch script: in a directory image (a SquashFS file cannot be looked into before
    the runtime mounts it), every directory the runtime binds onto and cannot make is there, else one
    line naming it and what to do, before the runtime's own ``can't mkdir`` on every node."""
    from slurmkit.containers import runtimes

    targets = runtimes.words_text(wrapped.bind_targets, shell_quote)
    own = "".join(" || $slurmkit_t == %s/*" % shell_quote(d) for d in wrapped.host_dirs)
    return ('for slurmkit_t in %s; do [[ ! -d %s || -d %s$slurmkit_t%s ]] || { echo "slurmkit: error: image %s '
            'on node $SLURMD_NODENAME has no directory $slurmkit_t to mount onto, and its runtime cannot make one '
            'in the image: mount at a directory the image has (--mount SOURCE:/mnt) or add $slurmkit_t to the '
            'image" >&2; exit 1; }; done'
            % (targets, shell_quote(location), shell_quote(location), own, in_double_quotes(image)))

