"""examples/ddp_train.py for real, without Slurm: torch.distributed.run --standalone,
two gloo workers over loopback.

What the cluster tests build on: every rank reports the same final loss and the
same weights (DDP kept the replicas in step), a run resumed from a checkpoint
ends bit-for-bit where an uninterrupted one does, SIGUSR1 on one rank stops
every rank at one step with a saved checkpoint, and a newer partial
checkpoint is skipped on resume, and torchrun hands SIGUSR1 to its workers when
told to.  Also slurmkit.checkpoint's distributed helper with a real
torch.distributed.checkpoint save by both ranks.

Needs PyTorch (``make venv-train``); the tests that run it are marked ``torch``
and skip without it.  No cluster needed.  About 40 s on two cores.
"""

import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from slurmkit import checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "ddp_train.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
requires_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="PyTorch is not installed in %s (make venv-train)" % sys.executable)

FINAL = re.compile(r"^final rank=(\d+) step=(\d+) loss=(\S+)$", re.M)
PARAMS = re.compile(r"^params rank=(\d+) sha256=(\w+)$", re.M)
START = re.compile(r"^rank=(\d+) world=(\d+) local_rank=(\d+) node=\S+ host=\S+ master=\S+:\d+$", re.M)


def clean_env():
    """This environment without anything that would make the example think it is in a job."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SLURMKIT_", "TORCHELASTIC_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONPATH=REPO)
    return env


def torchrun(script, *args, nproc=2, env=None):
    """Run ``script`` under torch.distributed.run; (exit status, stdout + stderr)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), script, *map(str, args)]
    proc = subprocess.run(cmd, env=env or clean_env(), capture_output=True, text=True, timeout=180)
    return proc.returncode, proc.stdout + proc.stderr


def children(pid):
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def train(*args):
    # --timeout: a lost peer fails the run in a minute instead of the default ten.
    return torchrun(EXAMPLE, "--timeout", 60, "--log-every", 0, *args)


def finals(out):
    """{rank: (step, loss text)} and {rank: weights digest}, one per rank or fail."""
    found = FINAL.findall(out)
    digests = PARAMS.findall(out)
    assert sorted(int(r) for r, _, _ in found) == [0, 1], out
    assert sorted(int(r) for r, _ in digests) == [0, 1], out
    return {int(r): (int(s), loss) for r, s, loss in found}, {int(r): d for r, d in digests}


@pytest.fixture(scope="module")
def uninterrupted():
    """20 steps at once, no checkpoints: the reference every resumed run must match."""
    rc, out = train("--steps", 20)
    assert rc == 0, out
    return out


@pytest.mark.torch
@requires_torch
def test_two_ranks_agree_on_loss_and_weights(uninterrupted):
    starts = START.findall(uninterrupted)
    assert sorted((int(r), int(w), int(l)) for r, w, l in starts) == [(0, 2, 0), (1, 2, 1)]
    losses, digests = finals(uninterrupted)
    assert losses[0] == losses[1] and losses[0][0] == 20
    assert digests[0] == digests[1]          # DDP kept the two replicas identical
    # it learned something: the evaluation loss at step 0 is about 0.69
    assert float(losses[0][1]) < 0.5


@pytest.mark.slow
@pytest.mark.torch
@requires_torch
def test_resumed_run_ends_exactly_where_an_uninterrupted_one_does(uninterrupted, tmp_path):
    root = tmp_path / "ckpt"
    rc, out = train("--steps", 10, "--checkpoint-every", 4, "--checkpoint-dir", root)
    assert rc == 0, out
    assert sorted(os.listdir(root)) == ["step-000004", "step-000008", "step-000010"]
    assert finals(out)[0][0][0] == 10

    rc, out = train("--steps", 20, "--checkpoint-every", 4, "--checkpoint-dir", root)
    assert rc == 0, out
    assert "resume from=%s step=10" % (root / "step-000010") in out
    assert finals(out) == finals(uninterrupted)
    found = checkpoint.latest(root)
    assert (found.step, found.convention, found.skipped) == (20, "marker", [])


@pytest.mark.slow
@pytest.mark.torch
@requires_torch
def test_sigusr1_on_one_rank_saves_stops_all_and_resume_skips_a_partial_newer_checkpoint(
        uninterrupted, tmp_path):
    root = tmp_path / "ckpt"
    # Rank 0 signals itself after step 7, as Slurm's --signal=USR1@grace would.
    rc, out = train("--steps", 20, "--checkpoint-every", 5, "--checkpoint-dir", root,
                    "--self-signal-at", 7)
    assert rc != 0, out                      # torchrun reports the workers' 75 as a failure
    for rank in (0, 1):
        assert "stop rank=%d step=7: SIGUSR1 (saved step 7); exit 75, resume me" % rank in out
    assert "final rank" not in out
    found = checkpoint.latest(root)
    assert (found.step, found.skipped) == (7, [])

    # What a node failure during the next save would leave: a newer directory
    # without its marker, and a temporary one.
    os.makedirs(root / "step-000009")
    (root / "step-000009" / "state.pt").write_bytes(b"cut off")
    os.makedirs(root / ".step-000010.tmp-4242")

    rc, out = train("--steps", 20, "--checkpoint-every", 5, "--checkpoint-dir", root)
    assert rc == 0, out
    assert "skipped %s: no COMPLETE marker" % (root / "step-000009") in out
    assert "skipped %s: temporary name" % (root / ".step-000010.tmp-4242") in out
    assert "resume from=%s step=7" % (root / "step-000007") in out
    assert finals(out) == finals(uninterrupted)


@pytest.mark.slow
@pytest.mark.torch
@requires_torch
def test_torchrun_passes_sigusr1_on_when_told_to_and_the_workers_save(tmp_path):
    # What a job template relies on: the batch shell sends USR1 to torchrun, which
    # hands it to its workers only when SIGUSR1 is among the signals it handles.
    # torch 2.13's launcher sets TORCHELASTIC_SIGNALS_TO_HANDLE itself from
    # --signals-to-handle (env PET_SIGNALS_TO_HANDLE); exporting the former has no effect.
    root = tmp_path / "ckpt"
    env = clean_env()
    env["PET_SIGNALS_TO_HANDLE"] = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           EXAMPLE, "--timeout", "60", "--steps", "100000", "--checkpoint-every", "0",
           "--log-every", "20", "--checkpoint-dir", str(root)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = []
    try:
        seen = []
        for line in proc.stdout:               # training is under way once rank 0 logs a step
            seen.append(line)
            if line.startswith("step="):
                break
        workers = children(proc.pid)
        proc.send_signal(signal.SIGUSR1)
        proc.wait(timeout=120)
    finally:
        # A launcher that died of the signal leaves its workers running (and holding
        # the output pipe): end whatever of ours is left.
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    rest = proc.stdout.read()
    out = "".join(seen) + rest
    stops = re.findall(r"^stop rank=(\d) step=(\d+): SIGUSR1 \(saved step \d+\); exit 75", out, re.M)
    assert sorted(r for r, _ in stops) == ["0", "1"], out
    assert stops[0][1] == stops[1][1]         # both ranks stopped after the same step
    found = checkpoint.latest(root)
    assert found.step == int(stops[0][1]) and found.convention == "marker"


def _catches_sigusr1(pid):
    """Whether process ``pid`` has a handler for SIGUSR1 (/proc's SigCgt mask, bit 10)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            mask = next(line.split()[1] for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) & (1 << (signal.SIGUSR1 - 1)))


def _torch_loaded(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libtorch" in f.read()


@pytest.mark.slow
@pytest.mark.torch
@requires_torch
def test_a_sigusr1_that_comes_while_torch_still_imports_is_not_lost(tmp_path):
    # Slurm may send its --signal warning up to a minute early: at a short time limit, as the job
    # starts.  The program takes SIGUSR1 before importing torch (seconds on a busy node); a signal
    # in that window must lead to a save at the first step, not kill the worker with nothing saved.
    root = tmp_path / "ckpt"
    cmd = [sys.executable, EXAMPLE, "--timeout", "60", "--steps", "1000", "--checkpoint-every", "0",
           "--log-every", "0", "--checkpoint-dir", str(root)]
    proc = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _catches_sigusr1(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "no SIGUSR1 handler: %s" % proc.stdout.read()
            time.sleep(0.005)
        # The handler is there before torch's libraries are even mapped: the window is closed.
        assert not _torch_loaded(proc.pid)
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 75, out
    assert "stop rank=0 step=1: SIGUSR1 (saved step 1); exit 75, resume me" in out, out
    assert checkpoint.latest(root).step == 1


DCP_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    from slurmkit import checkpoint
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    root = sys.argv[1]
    # Each rank owns one entry, so each writes a file of its own; one entry is shared.
    state = {"shared": torch.arange(6.0), "rank%d" % rank: torch.full((1000,), float(rank))}
    with checkpoint.distributed_checkpoint_dir(root, 3, rank=rank, world_size=world,
                                               barrier=dist.barrier) as tmp:
        dcp.save(state, checkpoint_id=tmp)
    # every rank returns only once the checkpoint is published
    assert os.path.exists(os.path.join(checkpoint.step_path(root, 3), checkpoint.MARKER))
    back = {"shared": torch.zeros(6), "rank%d" % rank: torch.zeros(1000)}
    dcp.load(back, checkpoint_id=checkpoint.step_path(root, 3))
    assert all(torch.equal(back[k], state[k]) for k in state), back
    print("loaded rank=%d" % rank, flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.mark.slow
@pytest.mark.torch
@requires_torch
def test_distributed_checkpoint_written_by_both_ranks_is_published_once(tmp_path):
    script = tmp_path / "dcp_save.py"
    script.write_text(DCP_SCRIPT)
    root = tmp_path / "ckpt"
    rc, out = torchrun(script, root)
    assert rc == 0, out
    assert "loaded rank=0" in out and "loaded rank=1" in out
    assert os.listdir(root) == ["step-000003"]
    names = sorted(os.listdir(root / "step-000003"))
    assert names[:2] == [".metadata", checkpoint.MARKER]
    assert len([n for n in names if n.endswith(".distcp")]) == 2      # one file per rank
    found = checkpoint.latest(root)
    assert (found.step, found.convention) == (3, "marker")
    # without our marker, torch's own .metadata still marks it complete
    os.unlink(root / "step-000003" / checkpoint.MARKER)
    assert checkpoint.latest(root).convention == "dcp"


def test_without_torch_the_example_says_so_in_one_line():
    # -S: no site-packages, so no torch, whatever this Python has installed.
    proc = subprocess.run([sys.executable, "-S", EXAMPLE, "--steps", "3"], env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == ("error: PyTorch is not installed in %s; install it into that environment "
                           "(pip install torch) or run this program with a Python that has it\n"
                           % sys.executable)
