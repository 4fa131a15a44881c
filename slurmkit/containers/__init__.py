"""Jobs in container images (issue "Jobs in container images"): the room, not yet built.

What goes here: one small adapter per container runtime (``oci``: Slurm's own
``srun --container`` with the cluster's oci.conf; ``charliecloud``; ``pyxis``
(enroot); ``apptainer``; ``podman-hpc``), each a pure function from the image,
its mounts, the variables that must win over the image's own and the launch
line to the wrapped launch line plus the checks the job runs on the node
(that it really runs in the image; that the runtime and image exist there).
The runtime wraps the training step only: the batch script stays on the
host, where Slurm's commands are.

Who calls it: the script renderer (``slurmkit.script``) wraps each template's
launch line; ``health`` checks that a node's runtime can start; the site
schema (``slurmkit.site.schema``) describes ``runtime`` and the images per
cluster.  So it sits below ``script``: it may import ``site``, ``envnames``
and ``errors``, and nothing that runs a command (``slurm``, ``remote``) or
anything above (tests/unit/test_architecture.py).
"""
