"""Making the job script: ``render`` (what the user asked for, a ``JobSpec``, becomes a
checked script), the Jinja2 templates from ``templates/`` found, loaded and rendered
(``templates``), values made safe for bash and ``#SBATCH`` lines (``quoting``), the
``#SBATCH`` header: fit, switches, directives (``sbatch_header``), tasks started in a
container image (``container_launch``), the collective-library environment for a
partition's fabric (``collective``), the leaf-switch arithmetic of ``--comm heavy``
(``topology``) and the cache of rendered scripts (``cache``)."""
