"""Several independent clusters as one: the cluster survey (``survey``: one
round trip per cluster, for ``slurmkit clusters``), placement of a job on the
cluster where it starts soonest (``planner``) and the cool-down of clusters
that keep failing (``cooldown``)."""
