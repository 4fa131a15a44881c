"""The example training program, ``examples/ddp_train.py``, as the training tests run it (with the
repository's .venv Python, which ``make venv-train`` gives PyTorch), and what it prints, read back:
each rank's start, its final step and loss, where it resumed from; and the checks every training test
makes of them.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "examples" / "ddp_train.py")
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable

RANK_RE = re.compile(r"^rank=(\d+) world=(\d+) local_rank=(\d+) node=(\S+) host=\S+ master=(\S+):(\d+)$", re.M)
FINAL_RE = re.compile(r"^final rank=(\d+) step=(\d+) loss=(\S+)$", re.M)
RESUME_RE = re.compile(r"^resume from=(\S+) step=(\d+)$", re.M)


def ranks(text):
    """{rank: (world, local_rank, node, master_addr, master_port)} and {rank: (step, loss)} from a job's output."""
    started = {int(r): (int(w), int(lr), node, addr, int(port)) for r, w, lr, node, addr, port in RANK_RE.findall(text)}
    return started, finals(text)


def finals(text):
    """{rank: (step, loss)} from a job's output."""
    return {int(r): (int(s), loss) for r, s, loss in FINAL_RE.findall(text)}


def check_final(text, steps, world):
    """Every rank trained to ``steps`` and ended with the same evaluation loss."""
    final = finals(text)
    assert sorted(final) == list(range(world)), text[-3000:]
    assert {s for s, _ in final.values()} == {steps}, final
    assert len({loss for _, loss in final.values()}) == 1, "final losses differ across ranks: %s" % final


def check_training(text, world, steps):
    """Every rank of a ``world``-sized job started, trained to ``steps`` and ended with the same loss; the
    ranks' starts."""
    started, _ = ranks(text)
    assert sorted(started) == list(range(world)), text[-3000:]
    assert {s[0] for s in started.values()} == {world}
    check_final(text, steps, world)
    return started
