"""Each attempt's job spec: the tracked spec plus attempt number, checkpoint and the nodes to avoid."""

import pytest

from slurmkit.requeue.journal import Attempt, Tracked
from slurmkit.requeue.tracking import attempt_spec


def _tracked(excluded, nodes=1, exclude=()):
    return Tracked(id=1, name="train", site="local", cluster="alpha", partition="cpu",
                   spec={"command": ["python", "train.py"], "nodes": nodes, "exclude": list(exclude)},
                   checkpoint_dir="/ckpt/train", shared_clusters=[], budget={}, state="active", reason="",
                   excluded=list(excluded), created=0.0, updated=0.0)


def _attempt(number=2, resume_from="/ckpt/train/step-000020"):
    return Attempt(id=7, tracked_id=1, number=number, token="tok2", cluster="alpha", job_id=None, phase="intent",
                   resume_from=resume_from, resume_step=20)


def test_an_attempt_carries_its_token_number_checkpoint_and_exclusions():
    spec = attempt_spec(_tracked(["an1"], exclude=["an4"]), _attempt())
    assert (spec.token, spec.attempt, spec.checkpoint_dir, spec.resume_from) == (
        "tok2", 2, "/ckpt/train", "/ckpt/train/step-000020")
    assert spec.exclude == ("an4", "an1")          # the user's own first, then the daemon's


@pytest.mark.parametrize("excluded,nodes,partition_nodes,kept", [
    # room for 3 (4 nodes, a 1-node job): both failed nodes stay excluded
    (["an1", "an2"], 1, 4, ("an1", "an2")),
    (["an1", "an2", "an3"], 1, 4, ("an1", "an2", "an3")),
    # more failed nodes than room: the newest ones, so the job can still run somewhere
    (["an1", "an2", "an3", "an4"], 1, 4, ("an2", "an3", "an4")),
    (["an1", "an2", "an3"], 2, 4, ("an2", "an3")),
    # no room at all: none
    (["an1"], 4, 4, ()),
])
def test_exclusions_leave_the_job_room_to_run(excluded, nodes, partition_nodes, kept):
    spec = attempt_spec(_tracked(excluded, nodes=nodes), _attempt(), partition_nodes)
    assert spec.exclude == kept


def test_the_first_attempt_keeps_the_users_begin_and_dependency_and_a_restart_starts_now():
    tracked = _tracked([])
    tracked.spec.update(begin="now+2hours", dependency="afterok:1234")
    first = attempt_spec(tracked, _attempt(number=1, resume_from=None))
    assert (first.begin, first.dependency) == ("now+2hours", "afterok:1234")
    restart = attempt_spec(tracked, _attempt(number=2))
    assert (restart.begin, restart.dependency) == (None, None)


def test_on_another_cluster_only_the_exclusions_naming_its_own_nodes_are_kept():
    # beta refuses a job excluding alpha's an1 ("Invalid node name specified"): a move must not carry it.
    tracked = _tracked(["an1", "bn2"], exclude=["an4"])
    spec = attempt_spec(tracked, _attempt(), 2, cluster_nodes={"bn1", "bn2"})
    assert spec.exclude == ("bn2",)
    assert attempt_spec(tracked, _attempt(), 8, cluster_nodes={"an1", "an2", "an4"}).exclude == ("an4", "an1")


def test_a_restart_moved_to_another_cluster_is_submitted_there_without_the_first_clusters_nodes(tmp_path):
    """The daemon's own submit_attempt, on FakeSlurm: after a NODE_FAIL on alpha's an1 the restart goes to beta
    (alpha unreachable) with no --exclude of alpha's names, and back on alpha it avoids an1 again."""
    from slurmkit.requeue import tracking
    from slurmkit.testing import FakeSlurm, fake_session

    alpha, beta = FakeSlurm("alpha", nodes=["an1", "an2", "an3"]), FakeSlurm("beta", nodes=["bn1", "bn2"])
    session = fake_session(alpha=alpha, beta=beta)
    tracked = _tracked(["an1"])
    tracked.partition = "gpu"                       # the fake site's
    tracked.attempts.append(Attempt(id=6, tracked_id=1, number=1, token="tok1", cluster="alpha", job_id="5",
                                    phase="ended", resume_from=None, resume_step=None))
    where, job = tracking.submit_attempt(lambda site: session, tracked, _attempt(), "beta")
    assert where == "beta" and "--exclude" not in beta.table[job].script
    tracked.attempts.append(_attempt())
    where, job = tracking.submit_attempt(lambda site: session, tracked, _attempt(number=3), "alpha")
    assert "#SBATCH --exclude=an1\n" in alpha.table[job].script
