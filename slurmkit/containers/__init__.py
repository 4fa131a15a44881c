"""Jobs in container images: what each container runtime needs, as pure data and functions.

- :mod:`~slurmkit.containers.grammar`: the values a user or a site writes (an image, a
  ``SRC[:DST[:ro]]`` mount, a runtime's name), checked once for the site schema, the
  command line and the renderer alike; hostile values are refused here.
- :mod:`~slurmkit.containers.runtimes`: one small adapter per runtime (``oci``: Slurm's own
  ``srun --container`` with the cluster's oci.conf; ``charliecloud``; ``pyxis`` (enroot);
  ``apptainer``; ``podman-hpc``), each a pure function from the image, its mounts and the
  variables that must win over the image's own to how ``srun`` starts a task in the image:
  options for ``srun`` itself, or a command put in front of the task.

The runtime wraps the training step only: the batch script stays on the host, where
Slurm's commands are.  The script renderer (:mod:`slurmkit.script.container_launch`) chooses the
adapter from the site's ``containers`` settings and prints what it returns into the
templates' launch lines, with the in-job checks (the runtime is on the node, the image is
there, the task really runs in the image).

It knows nothing of sites, Slurm or SSH: it sits below ``site`` (whose schema checks its
values with the same grammar), beside ``times`` and ``envnames``, and imports only
``errors`` (tests/unit/test_architecture.py).
"""
