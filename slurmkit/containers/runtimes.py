"""One adapter per container runtime: how ``srun`` starts a task inside an image.

Each adapter is a pure function of an :class:`Request` (the image as the runtime
names it, the mounts, the variables that must win over the image's own, the
accelerator and fabric of the partition) returning a :class:`Wrapped`:

- ``srun_options``: options for ``srun`` itself (Slurm's ``--container`` for
  ``oci``; pyxis's ``--container-image`` and friends);
- ``prefix``: a command put in front of the task (``ch-run IMAGE --``,
  ``apptainer exec ... IMAGE``, ``podman-hpc run ... IMAGE``);
- ``binary``: the program that must be on each node for it to work, for the
  job's own check and ``slurmkit health``;
- ``needs_user``: the runtime refuses to start without ``$USER``, which a batch
  job need not have, so the batch script sets it;
- ``bind_targets``: directories the runtime binds onto but cannot make in a
  read-only image, so each must already be one there (the batch script checks
  a directory image first and says which is missing, instead of the runtime's
  ``can't mkdir``); ``host_dirs``: those the runtime brings from the host
  itself, under which nothing needs checking.

Words are data, not shell text: a word is a tuple of parts, each a literal
string (the renderer shell-quotes it) or a :class:`Var`, a variable the shell
expands on the node (``$PWD``: the job's working directory, the same path in the
image).  So nothing a user or a site wrote can become shell syntax.

What each runtime does with the environment, the network and devices, and so
what the adapter must ask for:

- ``oci``: Slurm starts the bundle with the commands of the cluster's oci.conf;
  mounts, namespaces and the environment are the bundle's ``config.json``'s, and
  slurmkit can add none (a mount given for such an image is refused).
- ``charliecloud``: ``ch-run`` keeps the host's environment, network and
  ``/dev``; binds are read-write only in 0.31 (a read-only mount is refused), and
  the target directory must exist in the image.  It needs ``$USER``.
- ``pyxis``: srun options; the image's variables win over the host's unless
  ``--container-env`` names them, so it names every variable slurmkit sets.
- ``apptainer``: host network and environment by default; ``--env NAME=$NAME``
  makes slurmkit's values win over the image's ``%environment``, ``--nv`` brings
  the NVIDIA driver in.
- ``podman-hpc``: a private network and environment unless asked: ``--net=host``,
  ``--env-host``, ``--ipc=host``, ``--gpu`` on NVIDIA partitions, the RDMA devices
  on InfiniBand and RoCE.
"""

from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple, Union

from slurmkit.containers.grammar import Mount


# The program each runtime runs on the node, and its arguments that show it can start (exit 0):
# what the job script and `slurmkit health` look for.  oci's programs are the cluster's oci.conf's.
PROGRAMS = {"charliecloud": ("ch-run", "--version"), "pyxis": ("enroot", "version"),
            "apptainer": ("apptainer", "--version"), "podman-hpc": ("podman-hpc", "--version")}
# oci.conf's keys that name a command Slurm runs (RunTimeRun="runc --root=/run/slurm-oci run %n.%u %b").
OCI_CONF_COMMANDS = ("RunTimeQuery", "RunTimeCreate", "RunTimeStart", "RunTimeKill", "RunTimeDelete", "RunTimeRun")


def oci_conf_programs(text: str) -> Tuple[str, ...]:
    """The programs an oci.conf has Slurm run (the first word of each RunTime* command), in order, once each."""
    import shlex

    found = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.strip() not in OCI_CONF_COMMANDS:
            continue
        # The command is one quoted value: RunTimeRun="runc ... run %n.%u.%j -b %b".
        try:
            words = shlex.split(value)
            words = shlex.split(words[0]) if len(words) == 1 else words
        except ValueError:
            words = value.strip().strip('"').split()
        if words and words[0] not in found:
            found.append(words[0])
    return tuple(found)


class Var(NamedTuple):
    """A shell variable expanded on the node, e.g. ``Var("PWD")``."""

    name: str


Part = Union[str, Var]
Word = Tuple[Part, ...]


class Request(NamedTuple):
    """What a job asks of the runtime."""

    image: str                           # as the runtime names it (a path, a reference)
    mounts: Tuple[Mount, ...] = ()
    env: Tuple[str, ...] = ()            # variables slurmkit sets that must win over the image's own
    accelerator: str = "none"            # the partition's: nvidia, ascend, none
    rdma: bool = False                   # the partition's fabric is InfiniBand or RoCE
    workdir: bool = True                 # start in the job's working directory ($PWD, mounted at its path)
    options: Tuple[str, ...] = ()        # the site's own options, right after the runtime's command


class Wrapped(NamedTuple):
    srun_options: Tuple[Word, ...] = ()
    prefix: Tuple[Word, ...] = ()
    binary: Optional[str] = None
    needs_user: bool = False
    bind_targets: Tuple[Word, ...] = ()
    host_dirs: Tuple[str, ...] = ()


class RuntimeRefusal(ValueError):
    """The runtime cannot do what the job asks (a sentence naming the runtime and what to do)."""


PWD = Var("PWD")
# ch-run 0.31 binds the host's /tmp into every container (unless --private-tmp): a bind target below
# it is the host's directory, there whatever the image holds.
CH_RUN_HOST_DIRS = ("/tmp",)
RDMA_DEVICES = "/dev/infiniband"
RDMA_SYSFS = "/sys/class/infiniband"


def _w(*parts: Part) -> Word:
    return tuple(parts)


def _site_options(request: Request) -> Tuple[Word, ...]:
    """The site's own options (``containers.options``), each one literal word."""
    return tuple(_w(option) for option in request.options)


def oci(request: Request) -> Wrapped:
    if request.mounts:
        raise RuntimeRefusal(
            "runtime oci (Slurm's --container) takes its mounts from the bundle's config.json, so %s cannot be "
            "added for the job: add it to the bundle, or leave --mount out" % request.mounts[0].spec())
    return Wrapped(srun_options=(_w("--container=", request.image),) + _site_options(request))


def charliecloud(request: Request) -> Wrapped:
    prefix = [_w("ch-run"), *_site_options(request)]
    targets = []
    for mount in request.mounts:
        if mount.readonly:
            raise RuntimeRefusal("runtime charliecloud (ch-run) binds read-write only: mount %s without ':ro', or "
                                 "use a runtime that mounts read-only" % mount.spec())
        prefix.append(_w("--bind=%s:%s" % (mount.source, mount.target)))
        targets.append(_w(mount.target))
    if request.workdir:
        prefix += [_w("--bind=", PWD, ":", PWD), _w("--cd=", PWD)]
        targets.append(_w(PWD))
    prefix += [_w(request.image), _w("--")]
    # ch-run 0.31 makes a missing bind target only in a writable image (--write, which would change
    # the site's copy for every job): the target must be a directory of the image already.
    return Wrapped(prefix=tuple(prefix), binary=PROGRAMS["charliecloud"][0], needs_user=True,
                   bind_targets=tuple(targets), host_dirs=CH_RUN_HOST_DIRS)


def pyxis(request: Request) -> Wrapped:
    mounts = [m.full() for m in request.mounts]
    if request.rdma:
        mounts += ["%s:%s" % (RDMA_DEVICES, RDMA_DEVICES), "%s:%s:ro" % (RDMA_SYSFS, RDMA_SYSFS)]
    options = [_w("--container-image=", request.image)]
    word = _w("--container-mounts=", ",".join(mounts)) if mounts else None
    if request.workdir:
        word = (word + (",",) if word else _w("--container-mounts=")) + (PWD, ":", PWD)
        options.append(_w("--container-workdir=", PWD))
    if word:
        options.append(word)
    if request.env:
        options.append(_w("--container-env=", ",".join(request.env)))
    return Wrapped(srun_options=tuple(options) + _site_options(request), binary=PROGRAMS["pyxis"][0])


def apptainer(request: Request) -> Wrapped:
    prefix = [_w("apptainer"), _w("exec"), *_site_options(request)]
    if request.accelerator == "nvidia":
        prefix.append(_w("--nv"))
    for mount in request.mounts:
        prefix.append(_w("--bind=" + mount.full()))
    if request.workdir:
        prefix += [_w("--bind=", PWD, ":", PWD), _w("--pwd=", PWD)]
    for name in request.env:
        prefix.append(_w("--env=%s=" % name, Var(name)))
    prefix.append(_w(request.image))
    return Wrapped(prefix=tuple(prefix), binary=PROGRAMS["apptainer"][0])


def podman_hpc(request: Request) -> Wrapped:
    prefix = [_w("podman-hpc"), _w("run"), *_site_options(request), _w("--rm"), _w("--net=host"), _w("--ipc=host"), _w("--env-host")]
    if request.accelerator == "nvidia":
        prefix.append(_w("--gpu"))
    if request.rdma:
        prefix += [_w("--device=" + RDMA_DEVICES), _w("--volume=%s:%s:ro" % (RDMA_SYSFS, RDMA_SYSFS))]
    for mount in request.mounts:
        prefix.append(_w("--volume=" + mount.full()))
    if request.workdir:
        prefix += [_w("--volume=", PWD, ":", PWD), _w("--workdir=", PWD)]
    prefix.append(_w(request.image))
    return Wrapped(prefix=tuple(prefix), binary=PROGRAMS["podman-hpc"][0])


ADAPTERS: Dict[str, Callable[[Request], Wrapped]] = {
    "oci": oci, "charliecloud": charliecloud, "pyxis": pyxis, "apptainer": apptainer, "podman-hpc": podman_hpc,
}


def wrap(runtime: str, request: Request) -> Wrapped:
    """How ``runtime`` starts a task of ``request``; :class:`RuntimeRefusal` where it cannot."""
    return ADAPTERS[runtime](request)


def words_text(words: Sequence[Word], quote: Callable[[str], str]) -> str:
    """``words`` as shell text: literal parts quoted with ``quote``, variables as ``"$NAME"``."""
    return " ".join("".join('"$%s"' % part.name if isinstance(part, Var) else quote(part) for part in word if part != "")
                    for word in words)
