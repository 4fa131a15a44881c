"""Making the job script: render (Jinja2 templates from ``templates/``), the
collective-library environment for a partition's fabric (``collective``),
the leaf-switch arithmetic of ``--comm heavy`` (``topology``) and the cache
of rendered scripts (``cache``)."""
