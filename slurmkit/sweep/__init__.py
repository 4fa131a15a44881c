"""Sweeps: a whole hyper-parameter grid submitted as Slurm job arrays, followed and rerun as a set.

``slurmkit submit --sweep lr=1e-3,3e-4 --sweep seed=0..4 -- python train.py --lr {lr} --seed {seed}``
turns the grid (or the rows of a ``--sweep-file``) into *points*, places them
on one cluster or several, and submits one job array per chunk of points
that fits the cluster's ``MaxArraySize``/``max_array_tasks``.  The parts:

- ``points``:   the grid, points files, each point's stable id, placeholders (pure);
- ``arrays``:   array limits, chunking, ``--array`` specs, throttle and cluster shares (pure);
- ``script``:   one array's job script: the rendered job plus its points table and prologue (pure);
- ``journal``:  the sweep journal (SQLite, WAL) under the user's state directory;
- ``submission``: submit: plan the points, place them on clusters, submit their arrays;
- ``state``:    status: every task of the sweep's unfinished arrays, asked once per cluster;
- ``actions``:  rerun, move, cancel, throttle, and the restart of one point for the daemon;
- ``tracked``:  tasks of ``--auto-requeue`` sweeps as jobs of the requeue journal;
- ``autorequeue``: the requeue daemon that polls and restarts those tasks through their sweep;
- ``testing``:  a FakeSlurm that runs job arrays, for unit tests.

Layering: this package may import jobs, federation, script, slurm and
requeue; nothing below it imports it.
"""
