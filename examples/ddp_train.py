#!/usr/bin/env python3
"""A small, real distributed training program: the one slurmkit's tests run.

A two-layer MLP learns a fixed nonlinear function of synthetic data with
``torch.distributed`` and DistributedDataParallel: gloo on CPU, NCCL when CUDA
is available.  It checkpoints atomically with :mod:`slurmkit.checkpoint`,
resumes from ``SLURMKIT_RESUME_FROM`` or the latest complete checkpoint under
``--checkpoint-dir`` (default ``$SLURMKIT_CHECKPOINT_DIR``), and on SIGUSR1
(Slurm's warning before the time limit) saves at the next step boundary and
exits with 75.  Rank 0 writes a heartbeat every few seconds
(:func:`slurmkit.checkpoint.heartbeat`, at ``$SLURMKIT_HEARTBEAT``): with a
hang timeout, the requeue daemon ends and restarts a run whose heartbeat and
checkpoints stop moving.

Launch it with torchrun (what slurmkit's torchrun template does, one launcher
per node), with srun (one task per worker; the job must export MASTER_ADDR and
MASTER_PORT), or alone as a single process::

    GLOO_SOCKET_IFNAME=lo torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --steps 20
    python examples/ddp_train.py --steps 20

Every rank prints one line at start (rank, world, local rank, Slurm node, host,
rendezvous address) and one at the end::

    final rank=R step=S loss=L      (L: the evaluation loss, all-reduced: identical on every rank)
    params rank=R sha256=H          (H: the model's bytes; identical if DDP kept the replicas in step)

Resuming is exact: the batch of step s depends on (seed, s) only, the
optimizer's momentum is saved with the model, so 10 steps, then a run to 20
that resumes at 10, ends with the same loss, bit for bit, as 20 steps at once
(with the same world size and the same number of threads).

Exit status: 0 trained to --steps; 75 saved on SIGUSR1, resume me; 2 bad
usage, or PyTorch missing (one ``error:`` line, no traceback); CODE of
``--first-attempt-exit`` (a test's stand-in for an NCCL error); anything else
is a failure.
"""

import argparse
import datetime
import gc
import hashlib
import os
import signal
import socket
import sys
import time
import warnings

EXIT_SAVED = 75          # sysexits EX_TEMPFAIL; slurmkit.checkpoint.EXIT_SAVED
IN_DIM, HIDDEN = 16, 32
EVAL_ROWS = 512
EVAL_KEY = 2 ** 32 - 1     # the evaluation set's data key; steps use 0, 1, 2, ...


def say(text, stream=None):
    """One line in one write(2): lines of several ranks sharing a pipe or a Slurm output
    file never run into each other (print() writes the newline separately when Python
    is unbuffered, as PYTHONUNBUFFERED=1 makes it)."""
    stream = stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="train until this global step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split across ranks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=10,
                   help="steps between checkpoints (0: only at the end and on SIGUSR1)")
    p.add_argument("--checkpoint-dir", default=os.environ.get("SLURMKIT_CHECKPOINT_DIR") or None,
                   help="where checkpoints go (default $SLURMKIT_CHECKPOINT_DIR; none: no checkpoints)")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl when CUDA is available, else gloo")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds a collective (and the rendezvous) may wait for a peer")
    p.add_argument("--log-every", type=int, default=10, help="rank 0 prints the training loss")
    p.add_argument("--step-seconds", type=float, default=0.0, metavar="S",
                   help="sleep S seconds after every step of every attempt: a model whose step takes that long "
                        "(make bench-goodput times useful work by steps)")
    p.add_argument("--self-signal-at", type=int, default=None, metavar="STEP",
                   help="testing: rank 0 sends itself SIGUSR1 after this step, as Slurm would")
    # The first attempt of a job under slurmkit's requeue daemon (SLURMKIT_ATTEMPT 1, or
    # outside such a job): what a test fails; the daemon's restarts then run normally.
    p.add_argument("--first-attempt-step-seconds", type=float, default=0.0, metavar="S",
                   help="testing: on the first attempt, sleep S seconds after every step (a slow model: "
                        "a test can fail the run part-way); restarts run at full speed")
    p.add_argument("--first-attempt-exit", type=_step_code, default=None, metavar="STEP:CODE[:RANK]",
                   help="testing: on the first attempt, every rank exits with CODE after STEP (and its "
                        "checkpoint, if one is due), as a program does after an NCCL error; with RANK, only "
                        "that rank, at once and without leaving the process group (the others then fail "
                        "in their next collective, or are stopped by the launcher)")
    p.add_argument("--first-attempt-hang", type=_step_rank, default=None, metavar="STEP[:RANK]",
                   help="testing: on the first attempt, after STEP (and its checkpoint), every rank (with RANK, "
                        "only that one) stops making progress for good, as a rank stuck in a collective or on "
                        "a broken device does; the others then wait in the next collective")
    args = p.parse_args(argv)
    if args.steps < 0 or args.batch_size < 1 or args.checkpoint_every < 0:
        p.error("--steps and --checkpoint-every must be >= 0, --batch-size >= 1")
    return args


def _step_rank(text):
    parts = text.split(":")
    if not (len(parts) in (1, 2) and all(p.isdigit() for p in parts)):
        raise argparse.ArgumentTypeError("STEP or STEP:RANK, e.g. 20 or 20:1")
    return int(parts[0]), (int(parts[1]) if len(parts) == 2 else None)


def _step_code(text):
    parts = text.split(":")
    if not (len(parts) in (2, 3) and all(p.isdigit() for p in parts) and 1 <= int(parts[1]) <= 255):
        raise argparse.ArgumentTypeError("STEP:CODE or STEP:CODE:RANK, e.g. 30:42 (CODE 1-255)")
    return int(parts[0]), int(parts[1]), (int(parts[2]) if len(parts) == 3 else None)


def first_attempt():
    """Whether this is a job's first run: SLURMKIT_ATTEMPT unset (no daemon) or 1."""
    return os.environ.get("SLURMKIT_ATTEMPT", "1") in ("", "1")


def import_torch():
    """torch, or exit 2 with one line saying what is wrong (no traceback in the job's output)."""
    # This program uses no NumPy; torch warns on import when it is absent.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        import torch
        import torch.distributed  # noqa: F401  (a build without it fails here, not mid-job)
    except ImportError as exc:
        if exc.name == "torch":
            msg = ("PyTorch is not installed in %s; install it into that environment "
                   "(pip install torch) or run this program with a Python that has it"
                   % sys.executable)
        else:
            msg = "PyTorch in %s does not import: %s" % (sys.executable, exc)
        say("error: " + msg, sys.stderr)
        sys.exit(2)
    return torch


def import_checkpoint():
    """slurmkit.checkpoint: installed, or from the checkout this file lives in; else None."""
    try:
        from slurmkit import checkpoint
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            from slurmkit import checkpoint
        except ImportError:
            return None
    return checkpoint


def launch_env():
    """(rank, world, local_rank) from torchrun's variables, srun's, or a lone process.

    Fills in MASTER_ADDR/MASTER_PORT for a lone process; a multi-process launch
    must provide them (torchrun does; for srun the job script exports them).
    """
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:                 # torchrun, or a launcher like it
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0))
    elif "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:   # a task of an srun step
        rank, world, local = int(env["SLURM_PROCID"]), int(env["SLURM_STEP_NUM_TASKS"]), int(env.get("SLURM_LOCALID", 0))
    else:
        rank, world, local = 0, 1, 0
    if world == 1:
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in env:
            with socket.socket() as s:                            # a free port on loopback
                s.bind(("127.0.0.1", 0))
                env["MASTER_PORT"] = str(s.getsockname()[1])
    elif not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
        say("error: %d processes but MASTER_ADDR/MASTER_PORT are not set; launch with torchrun "
            "(slurmkit's torchrun template) or export them in the job script" % world, sys.stderr)
        sys.exit(2)
    env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"] = str(rank), str(world), str(local)
    return rank, world, local


def broadcast_str(torch, dist, text, device):
    """Rank 0's ``text`` on every rank (broadcast_object_list would need NumPy)."""
    data = text.encode()
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    buf = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if dist.get_rank() == 0:
        buf.copy_(torch.tensor(list(data), dtype=torch.uint8))
    dist.broadcast(buf, src=0)
    return bytes(buf.cpu().tolist()).decode()


def finish(dist):
    """Leave together, then drop the process group (see also the end of this file)."""
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    # A signal only sets a flag: the save happens at a step boundary, never inside a
    # collective.  Installed first, before torch is imported (seconds on a busy node):
    # Slurm may send its --signal warning up to a minute early, so it can come as the
    # job starts, and SIGUSR1's default action would kill the worker with nothing saved.
    stop = {"signum": None}
    signal.signal(signal.SIGUSR1, lambda signum, frame: stop.__setitem__("signum", signum))
    torch = import_torch()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, local_rank = launch_env()
    # Before the rendezvous, so that a job stuck there still shows who came.
    say("rank=%d world=%d local_rank=%d node=%s host=%s master=%s:%s" % (
        rank, world, local_rank, os.environ.get("SLURMD_NODENAME", "-"), socket.gethostname(),
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]))

    ckpt = import_checkpoint()
    if args.checkpoint_dir and ckpt is None:
        say("warning: slurmkit.checkpoint is not importable; checkpoints disabled", sys.stderr)

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))

    def make_model():
        torch.manual_seed(args.seed)                              # the same start on every rank
        return torch.nn.Sequential(torch.nn.Linear(IN_DIM, HIDDEN), torch.nn.Tanh(),
                                   torch.nn.Linear(HIDDEN, 1))

    # The function to learn, fixed by the seed.
    g = torch.Generator().manual_seed(args.seed + 1)
    w_true = torch.randn(IN_DIM, 1, generator=g) / IN_DIM ** 0.5

    def data(rows, key):
        """Inputs and targets that depend on (seed, key) only: the same in every run."""
        g = torch.Generator().manual_seed((args.seed << 32) + key)
        x = torch.randn(rows, IN_DIM, generator=g)
        y = torch.sin(2 * x @ w_true) + 0.05 * torch.randn(rows, 1, generator=g)
        return x, y

    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    # Resume: rank 0 chooses the checkpoint (so every rank takes the same one even if
    # another appears meanwhile), every rank reads it.  The checkpoint directory must
    # be on a filesystem all nodes see: a restarted job runs on other nodes anyway.
    path = ""
    if rank == 0 and args.checkpoint_dir and ckpt is not None:
        try:
            path = ckpt.resume_path(root=args.checkpoint_dir) or ""
        except FileNotFoundError as exc:   # the checkpoint the job was told to resume from
            say("error: %s" % exc, sys.stderr)
            return 2                       # the other ranks fail at the broadcast below
    path = broadcast_str(torch, dist, path, device)
    start = 0
    if path:
        state_file = os.path.join(path, "state.pt") if os.path.isdir(path) else path
        state = torch.load(state_file, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
        del state
        if rank == 0:
            say("resume from=%s step=%d" % (path, start))
    ddp = DDP(model, device_ids=[device.index] if backend == "nccl" else None)

    def save(step):
        if rank == 0:
            with ckpt.checkpoint_dir(args.checkpoint_dir, step) as tmp:
                torch.save({"step": step, "model": model.state_dict(),
                            "optimizer": opt.state_dict(), "seed": args.seed, "world_size": world},
                           os.path.join(tmp, "state.pt"))
            say("checkpoint step=%d path=%s" % (step, ckpt.step_path(args.checkpoint_dir, step)))
        dist.barrier()   # nobody runs ahead (or exits) before the checkpoint is complete

    loss_fn = torch.nn.MSELoss()
    step = start
    pace, exit_at, hang_at = ((args.first_attempt_step_seconds, args.first_attempt_exit, args.first_attempt_hang)
                              if first_attempt() else (0.0, None, None))
    while step < args.steps:
        x, y = data(args.batch_size, step)
        x, y = x[rank::world].to(device), y[rank::world].to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()                                          # DDP averages the gradients
        opt.step()
        step += 1
        if pace or args.step_seconds:
            time.sleep(pace or args.step_seconds)
        if rank == 0 and args.log_every and step % args.log_every == 0:
            say("step=%d train_loss=%.6f" % (step, loss.item()))
        if rank == 0 and ckpt is not None:
            ckpt.heartbeat(step)                      # at most every few seconds: cheap every step
        if args.self_signal_at == step and rank == 0:
            os.kill(os.getpid(), signal.SIGUSR1)
        # Every rank must agree to stop at the same step: a signal may reach some ranks only.
        flag = torch.tensor([1 if stop["signum"] else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        stopping = bool(flag.item())
        if args.checkpoint_dir and ckpt is not None and (
                stopping or step == args.steps
                or (args.checkpoint_every and step % args.checkpoint_every == 0)):
            save(step)
        if stopping:
            saved = "saved step %d" % step if args.checkpoint_dir and ckpt else "no checkpoint dir: nothing saved"
            say("stop rank=%d step=%d: SIGUSR1 (%s); exit %d, resume me" % (rank, step, saved, EXIT_SAVED))
            finish(dist)
            return EXIT_SAVED
        if hang_at is not None and step == hang_at[0] and hang_at[1] in (None, rank):
            say("hang rank=%d step=%d: --first-attempt-hang, no progress from now on" % (rank, step))
            sys.stdout.flush()
            while True:                               # until the job is cancelled
                time.sleep(3600)
        if exit_at is not None and step == exit_at[0] and exit_at[2] in (None, rank):
            say("exit rank=%d step=%d: --first-attempt-exit, status %d" % (rank, step, exit_at[1]))
            if exit_at[2] is not None:
                # One rank dies on its own, as after a failed collective: no goodbye to the others.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(exit_at[1])
            finish(dist)
            return exit_at[1]

    # Evaluation on a fixed set, each rank its share, the sums all-reduced.
    with torch.no_grad():
        x, y = data(EVAL_ROWS, EVAL_KEY)
        x, y = x[rank::world].to(device), y[rank::world].to(device)
        sums = torch.tensor([((model(x) - y) ** 2).sum().item(), float(len(x))],
                            dtype=torch.float64, device=device)
    dist.all_reduce(sums)
    eval_loss = (sums[0] / sums[1]).item()
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(bytes(p.detach().cpu().contiguous().view(torch.uint8).flatten().tolist()))
    say("final rank=%d step=%d loss=%.10f" % (rank, step, eval_loss))
    say("params rank=%d sha256=%s" % (rank, digest.hexdigest()[:16]))
    finish(dist)
    return 0


if __name__ == "__main__":
    code = main()
    # Reference cycles (DDP's reducer's among them) keep the gloo process group, and its
    # threads, alive past main() and destroy_process_group(); freed during interpreter
    # shutdown they abort the process ("terminate called without an active exception",
    # exit -6) in about one run of ten with torch 2.13 on CPU.  Free them now.
    gc.collect()
    sys.exit(code)
