"""Reaching clusters whose Slurm commands run on a remote login node, over SSH.

- ``known_hosts``: known_hosts files and fingerprints, as OpenSSH reads them (pure);
- ``connect``: opening a strictly checked connection, through a bastion if any;
  the only module of slurmkit that imports paramiko (lazily);
- ``pool``: one connection per login node per process, shared by threads;
- ``runner``: :class:`~slurmkit.remote.runner.SSHRunner`, the
  :class:`~slurmkit.slurm.runner.Runner` that runs an argv on a login node;
- ``trust``: ``slurmkit site trust``: fetch a host key, show it, write it.

Importing this package (or the CLI) stays cheap on machines that only ever
use local clusters.
"""
