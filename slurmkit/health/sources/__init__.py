"""What a node is made of, read: the only modules of slurmkit that import psutil or
pynvml or read sysfs and the kernel log.

``host`` (psutil, mounts), ``nvml`` (NVIDIA GPUs), ``ascend`` (NPU device
files), ``infiniband`` (sysfs ports and counters), ``interfaces`` (sysfs network
interfaces, up or not), ``kmsg`` (Xid events);
``probe`` runs a reading that can block in the kernel in a forked child with
a deadline; ``fakes`` stands in for the hardware this machine lacks (NVML,
an HCA's sysfs, Xid lines) in tests.
"""
