"""The one-partition site and the check plan that the health command's tests and this_node's share."""

import textwrap

from slurmkit.health.plan import CheckPlan
from slurmkit.site.model import HealthChecks, HealthMount


def one_partition_site(tmp_path) -> str:
    """A site file (its path) of one cluster ``c`` with one partition ``cpu`` whose only mount check is
    ``TMP/scratch/%n``, present for node c1 alone: c1 is healthy, c2 is not."""
    (tmp_path / "scratch" / "c1").mkdir(parents=True)
    (tmp_path / "slurm.conf").write_text("# the Slurm commands here are fakes on PATH (or missing)\n")
    path = tmp_path / "site.yaml"
    path.write_text(textwrap.dedent("""\
        site: t
        health: {check_timeout: 1}
        clusters:
          c:
            slurm_conf: %s/slurm.conf
            partitions:
              cpu:
                accelerator: none
                cpus_per_node: 1
                health:
                  daemons: []
                  warn_load_per_core: null
                  mounts: [{path: %s/scratch/%%n, writable: true}]
        """ % (tmp_path, tmp_path)))
    return str(path)


def plan(tmp_path, **kw) -> CheckPlan:
    """A sweep's planned check of node c1 (``kw`` replaces fields) with the same mount check."""
    checks = HealthChecks(daemons=(), warn_load_per_core=None, dstate_seconds=0,
                          mounts=(HealthMount(str(tmp_path / "scratch" / "%n"), writable=True),))
    return CheckPlan(**dict(dict(node="c1", cluster="c", partition="cpu", checks=checks), **kw))
