"""Reaching clusters whose Slurm commands run on a remote login node.

``slurmkit.remote.ssh`` holds :class:`~slurmkit.remote.ssh.SSHRunner`, the
:class:`~slurmkit.slurm.runner.Runner` that executes an argv on a cluster's
login node over SSH, plus the host-key helpers behind ``slurmkit site trust``.
It is the only module of slurmkit that imports paramiko, and it does so
lazily, so importing this package (or the CLI) stays cheap on machines that
only ever use local clusters.
"""
