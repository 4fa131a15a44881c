"""What a live cluster is, discovered: ``slurmkit site init`` and ``slurmkit site check --live``.

An admin describes each cluster once, in a site file; this package writes
the first draft of that file from the cluster itself and later says where
the file and the cluster have drifted apart.

- :mod:`~slurmkit.discovery.facts` (pure): what Slurm says (partitions,
  nodes, topology, configuration) -> :class:`~slurmkit.discovery.facts.ClusterFacts`,
  the partitions as a site file describes them, each guess marked as one;
- :mod:`~slurmkit.discovery.sitefile` (pure): facts -> the text of a
  commented YAML site file (no YAML library: the comments are the point,
  and every value is written JSON-quoted, which YAML reads as it is);
- :mod:`~slurmkit.discovery.init`: reaching the clusters (a site's, or the
  local one), reading them through their backends, refusing to overwrite a
  file, validating the draft before it is written.

It sits on ``session``, ``slurm``, ``site``, ``script`` (the switch-wait
cap's one parser) and ``sysfs`` (what the probe job prints of sysfs is read
as ``slurmkit health`` reads the same files),
and is imported only by the CLI.
"""
