"""``slurmkit site init``: draft a site file from the live clusters.

Which clusters: those of a site (``--site``, all or the ``--cluster`` names
given), each reached as every command reaches it (locally where its
slurm.conf is, else over SSH on its login node); without a site, the
cluster this machine's Slurm commands talk to (``$SLURM_CONF``), named by
its ``ClusterName``.  Each is read through its backend: the release,
``scontrol show config``, partitions, nodes and topology (five commands),
turned into facts (:mod:`~slurmkit.discovery.facts`) and written as a
commented draft (:mod:`~slurmkit.discovery.sitefile`).

The draft is validated with the site loader before anything is written,
and an existing file is replaced only with ``force``: the file is created
exclusively (``O_EXCL``), so a file that appears meanwhile is not lost either.
"""

import os
import tempfile
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from slurmkit.discovery import facts as facts_mod
from slurmkit.discovery import sitefile
from slurmkit.errors import HostKeyError, SlurmCommandError, SlurmkitError, UsageError
from slurmkit.site.checkers import check_name
from slurmkit.site.model import Cluster


# The name of a cluster read without a site until Slurm's ClusterName names it.
UNNAMED = "local"


class InitResult(NamedTuple):
    text: str                            # the site file
    path: Optional[str]                  # where it was written; None: not written (the caller prints it)
    clusters: List[facts_mod.ClusterFacts]
    guesses: int                         # lines marked "guess:" (the command says how many to check)
    warnings: List[str] = []             # probes that could not run (the draft marks their guesses)


def login_cluster(login: str, name: Optional[str] = None, identity_file: Optional[str] = None,
                  known_hosts: Optional[str] = None, proxy_jump: Optional[str] = None) -> Cluster:
    """A cluster that is in no site file, reached over SSH at ``login`` ("[user@]host[:port]").

    Its host key must already be known (``known_hosts``, else OpenSSH's files): it is never accepted
    here.  Paths are made absolute, as the draft's ``login`` keeps them; ``name`` (``--cluster``) names
    the cluster in the draft, else Slurm's ClusterName does.
    """
    from slurmkit.errors import ConfigError
    from slurmkit.site.model import LoginNode
    from slurmkit.site.proxy_jump import parse_proxy_jump

    try:
        where = parse_proxy_jump(login)
    except ConfigError as exc:
        # The one parser of [user@]host[:port]; its messages name the site file's key, "proxy_jump ...".
        raise UsageError("--login" + str(exc)[len("proxy_jump"):]) from None
    if proxy_jump is not None:
        parse_proxy_jump(proxy_jump)
    if name is not None and check_name(name) is not None:
        raise UsageError("--cluster %r: %s" % (name, check_name(name)))

    def path(value):
        return os.path.abspath(os.path.expanduser(value)) if value else None

    return Cluster(name=name or UNNAMED, partitions={},
                   login=LoginNode(host=where.host, port=where.port, user=where.user,
                                   identity_file=path(identity_file), known_hosts=path(known_hosts),
                                   proxy_jump=proxy_jump))


def targets(site, names: Sequence[str] = ()) -> List[Cluster]:
    """The clusters to read: the site's (all, or ``names`` in the order given), else the local one."""
    if site is None:
        if names:
            raise UsageError("--cluster needs --site or --login: without either only the local cluster "
                             "(the one $SLURM_CONF names) can be read")
        conf = os.environ.get("SLURM_CONF")
        return [Cluster(name=UNNAMED, partitions={}, slurm_conf=os.path.abspath(conf) if conf else None)]
    if not names:
        return list(site.clusters.values())
    chosen, seen = [], set()
    for name in names:
        cluster = site.cluster(name)          # UsageError naming the site's clusters for an unknown one
        if cluster.name not in seen:
            seen.add(cluster.name)
            chosen.append(cluster)
    return chosen


def _topology(backend):
    from slurmkit.slurm.types import Topology

    try:
        return backend.topology()
    except SlurmCommandError:
        return Topology(())                   # no topology plugin: no switches to plan with


def read_cluster(backend, cluster: Cluster, own_name: bool = False) -> facts_mod.ClusterFacts:
    """One cluster's facts through ``backend`` (five Slurm commands); ``own_name``: named by its ClusterName."""
    version = backend.version()
    config = backend.config()
    name = cluster.name
    if own_name:
        # A cluster read without a site is named as Slurm names it (what sacct and squeue -M call it).
        own = (config.get("ClusterName") or "").strip()
        name = own if own and check_name(own) is None else "local"
    return facts_mod.cluster_facts(name, version, config, backend.partitions(), backend.nodes(),
                                   _topology(backend))


class Probes(NamedTuple):
    """What the probe jobs found, by node type (``NodeType.key``): a probe, or why it failed."""

    found: Dict[tuple, object]           # key -> nodeprobe.NodeProbe
    failures: Dict[tuple, str]           # key -> the message of the probe that did not run
    warnings: List[str]                  # one line per failure, naming the cluster


def probe_types(backend, cluster: Cluster, facts: facts_mod.ClusterFacts, wait_s: int = 30) -> Probes:
    """One probe job per node type of ``facts`` (what ``site init`` and ``site check --live`` both run).

    Each type's job runs in a partition holding its nodes, the partition's other nodes excluded, so
    Slurm may pick any free node of the type.  A probe that fails is recorded, not raised: the other
    types are still probed.
    """
    from slurmkit.discovery import nodeprobe
    from slurmkit.slurm import hostlist

    probes, failures, warnings = {}, {}, []
    for kind in facts.node_types:
        part_name = facts.type_partition(kind)
        if part_name is None:
            continue
        part = facts.partitions[part_name]
        health = cluster.partitions[part_name].health if part_name in cluster.partitions else None
        others = [n for n in part.nodes if n not in kind.nodes]
        try:
            probes[kind.key] = nodeprobe.probe_type(
                backend, part_name, exclude=[hostlist.fold(others)] if others else (), wait_s=wait_s,
                ib_root=health.ib_sysfs if health else "/sys/class/infiniband",
                device_dir=health.device_dir if health else "/dev")
        except SlurmkitError as exc:
            failures[kind.key] = str(exc)
            warnings.append("cluster %s: %s" % (facts.name, exc))
    return Probes(probes, failures, warnings)


def probe_drafts(facts: facts_mod.ClusterFacts, found: Probes):
    """The probes as the draft writes them (pure): (fabric drafts by partition, cluster notes).

    A type whose probe failed leaves its partitions' fabric a marked guess.
    """
    from slurmkit.discovery import nodeprobe
    from slurmkit.discovery.sitefile import FabricDraft

    probes, failures = found.found, found.failures
    notes = []
    runtimes = {}
    for probe in probes.values():
        for name in probe.runtime_names:
            runtimes.setdefault(name, probe.node)
    if runtimes:
        notes.append("container runtimes found on the nodes: %s; to run jobs in images (--image) set "
                     "containers.runtime and containers.images" % ", ".join(sorted(runtimes)))
    elif probes:
        notes.append("no container runtime found on the probed nodes (ch-run, runc, crun, enroot, apptainer, "
                     "podman-hpc)")
    fabrics = {}
    for part in facts.partitions.values():
        main = part.node_types[0].key if part.node_types else None
        if main in probes:
            fabric = nodeprobe.fabric_draft(probes[main], part.accelerator)
            extra = nodeprobe.device_notes(probes[main], part.accelerator,
                                           "%s:%s" % (part.gres_name, part.gpu_model), part.gpus_per_node)
            fabrics[part.name] = fabric._replace(comments=fabric.comments + tuple(extra))
        elif main in failures:
            fabrics[part.name] = FabricDraft(comments=(
                "guess: the probe did not run (%s): written as ethernet without an interface; set type, hcas and "
                "socket_ifname by hand, or run site init again" % facts_mod.printable(failures[main]),))
    return fabrics, tuple(notes)


def read_live(cluster: Cluster, backend_factory=None, probe: bool = True, probe_wait: int = 30,
              several: bool = False, own_name: bool = False):
    """One cluster as it is now: (facts, :class:`Probes` or None without ``probe``).

    The one way ``site init`` and ``site check --live`` reach a cluster: ``backend_factory`` (tests)
    makes its backend, by default :func:`slurmkit.session.make_backend` with the Slurm commands (every
    answer is text the facts parse).  A cluster that does not answer raises SlurmkitError naming it;
    with ``several`` clusters the message says how to leave it out.
    """
    if backend_factory is None:
        from slurmkit.session import make_backend

        def backend_factory(cluster):
            return make_backend(cluster, prefer_pyslurm=False)

    try:
        backend = backend_factory(cluster)
    except HostKeyError:
        raise                                 # it answered, with a key that is not trusted: said as it is
    except SlurmkitError as exc:
        raise SlurmkitError("cluster %s did not answer: %s" % (cluster.name, exc)) from exc
    try:
        try:
            facts = read_cluster(backend, cluster, own_name)
        except HostKeyError:
            raise
        except SlurmkitError as exc:
            hint = "; leave it out with --cluster NAME for each of the others" if several else ""
            raise SlurmkitError("cluster %s did not answer: %s%s" % (cluster.name, exc, hint)) from exc
        return facts, (probe_types(backend, cluster, facts, probe_wait) if probe else None)
    finally:
        backend.close()


def _refuse_existing(output: Optional[str], force: bool) -> None:
    if output is None:
        return
    if os.path.isdir(output):
        raise UsageError("%s is a directory; give -o a file name" % output)
    if os.path.lexists(output) and not force:
        raise UsageError("%s exists; pass --force to replace it, or write elsewhere with -o" % output)
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UsageError("the directory of %s does not exist; create it first" % output)


def validate_text(text: str) -> None:
    """Refuse a draft the site loader refuses (a bug here, said with the loader's first problem)."""
    from slurmkit.site import validate_files

    fd, path = tempfile.mkstemp(prefix="slurmkit-site-init-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        problems = validate_files([path])
    finally:
        os.unlink(path)
    if problems:
        raise SlurmkitError("the drafted site file does not validate (a slurmkit bug; please report it): %s"
                            % problems[0].message)


def _write(output: str, text: str, force: bool) -> None:
    """Write the draft whole or not at all (a failed write leaves no half file), over an existing one only
    with ``force``."""
    from slurmkit import textfile

    try:
        textfile.write_atomic(output, text, replace=force)
    except FileExistsError:
        raise UsageError("%s exists; pass --force to replace it, or write elsewhere with -o" % output) from None
    except OSError as exc:
        raise SlurmkitError("could not write %s: %s" % (output, exc.strerror or exc)) from None


def _untrusted(exc: HostKeyError, cluster: Cluster) -> HostKeyError:
    """The refusal of a ``--login`` host's key, saying how to trust it without a site (no ``site trust``)."""
    login = cluster.login
    where = login.known_hosts or "~/.ssh/known_hosts"
    how = "add its key to %s (`ssh-keyscan -p %d %s >> %s`) and run site init again" % (
        where, login.port, login.host, where)
    text = str(exc).replace("run `slurmkit site trust %s`" % cluster.name, how)
    return HostKeyError(text.replace(" (cluster %s)" % UNNAMED, "") if cluster.name == UNNAMED else text)


def init_site(site=None, names: Sequence[str] = (), output: Optional[str] = None, force: bool = False,
              backend_factory: Optional[Callable[[Cluster], object]] = None, clock=time, probe: bool = True,
              probe_wait: int = 30, login: Optional[Cluster] = None) -> InitResult:
    """Draft the site file (see the module docstring); write it to ``output`` when given.

    ``backend_factory`` (tests) makes a cluster's backend; by default each is
    reached as :func:`slurmkit.session.make_backend` decides.  A cluster that
    does not answer stops the whole draft, naming the cluster.  ``login``
    (:func:`login_cluster`) is a cluster in no site file, reached over SSH; it
    goes without ``site``, and the draft keeps its ``login``.
    """
    if login is not None and (site is not None or names):
        raise UsageError("--login reads a cluster that is in no site file; it goes without --site (a site's "
                         "clusters are reached through their own login entries)")
    if login is not None and os.environ.get("SLURMKIT_VIA", "").strip().lower() == "local":
        # Forced local, the draft would describe this machine's cluster under the login given.
        raise UsageError("--login reads the cluster over SSH, but SLURMKIT_VIA=local forces local commands; "
                         "unset SLURMKIT_VIA")
    _refuse_existing(output, force)
    clusters = [login] if login is not None else targets(site, names)
    drafts, warnings = [], []
    for cluster in clusters:
        try:
            facts, found = read_live(cluster, backend_factory, probe, probe_wait, several=len(clusters) > 1,
                                     own_name=site is None and cluster.name == UNNAMED)
        except HostKeyError as exc:
            raise (_untrusted(exc, cluster) if login is not None else exc) from None
        fabrics, notes = probe_drafts(facts, found) if found is not None else ({}, ())
        if found is not None:
            warnings.extend(found.warnings)
        drafts.append(sitefile.ClusterDraft(facts=facts, slurm_conf=cluster.slurm_conf, login=cluster.login,
                                            fabrics=fabrics, notes=notes))
    names_seen = [d.facts.name for d in drafts]
    if len(set(names_seen)) != len(names_seen):
        raise UsageError("two clusters are both called %s; read them from a site that names them apart"
                         % next(n for n in names_seen if names_seen.count(n) > 1))
    name = site.name if site is not None else drafts[0].facts.name
    written = "on %s" % time.strftime("%Y-%m-%d %H:%M", time.localtime(clock.time()))
    text = sitefile.site_text(name, drafts, written)
    validate_text(text)
    if output is not None:
        _write(output, text, force)
    return InitResult(text=text, path=output, clusters=[d.facts for d in drafts],
                      guesses=sum(1 for line in text.splitlines() if line.lstrip().startswith("# guess:")),
                      warnings=warnings)
