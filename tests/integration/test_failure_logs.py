"""failure_logs: what a failing integration test's report adds (no cluster needed)."""

import os
import time

import failure_logs


def test_job_ids_as_slurm_and_slurmkit_print_them_but_not_a_tracebacks_file_and_line():
    text = ("submitted gamma:6016\n  File \"tests/integration/test_requeue.py\", line 364\n"
            "test_requeue.py:277: in _run\nslurm_load_jobs error for JobId=77\njob 81 ended; job_id: 90\n")
    assert failure_logs.job_ids(text, clusters=["alpha", "beta", "gamma"]) == {"6016", "77", "81", "90"}
    assert failure_logs.job_ids(text) == {"77", "81", "90"}       # CLUSTER:ID only for known clusters
    assert failure_logs.job_ids("") == set()


def test_only_what_a_log_gained_and_the_lines_naming_the_failing_job(tmp_path):
    state = tmp_path / "state"
    (state / "gamma" / "ctld").mkdir(parents=True)
    ctld = state / "gamma" / "ctld" / "slurmctld.log"
    quiet = state / "gamma" / "munged.log"
    ctld.write_text("old line JobId=6016 before the module\n")
    quiet.write_text("nothing new\n")
    before = failure_logs.offsets(state)
    with ctld.open("a") as f:
        f.write("_slurm_rpc_submit_batch_job: JobId=6016 InitPrio=1\n")
        f.write("".join("sched: line %d\n" % i for i in range(100)))
        f.write("job_complete: JobId=6016 WEXITSTATUS 75\n")
    blocks = failure_logs.log_excerpts(before, failure_logs.offsets(state), {"6016"})
    assert len(blocks) == 1                                       # munged.log did not grow
    text = blocks[0]
    assert text.startswith("==> %s (102 new lines)" % ctld)
    assert "_slurm_rpc_submit_batch_job: JobId=6016" in text      # named the job, before the tail
    assert "old line" not in text                                 # written before the module started
    assert "job_complete: JobId=6016 WEXITSTATUS 75" in text and "sched: line 99" in text
    assert "sched: line 10\n" not in text                         # the tail is the last TAIL lines
    # 601 is not 6016: no line is taken for naming it
    assert "lines naming job" not in failure_logs.log_excerpts(before, failure_logs.offsets(state), {"601"})[0]


def test_a_log_that_started_again_is_read_from_its_start(tmp_path):
    log = tmp_path / "slurmd.n1.log"
    log.write_text("x" * 1000 + "\n")
    before = failure_logs.offsets(tmp_path)
    log.write_text("restarted\n")                                 # shorter than before: a new file
    assert "restarted" in failure_logs.log_excerpts(before, failure_logs.offsets(tmp_path), set())[0]


def test_job_output_files_named_for_the_failing_job_and_written_since_the_start(tmp_path):
    (tmp_path / "deep" / "dir").mkdir(parents=True)
    mine = tmp_path / "deep" / "dir" / "slurmkit-train-6016.out"
    mine.write_text("".join("line %d\n" % i for i in range(100)) + "Traceback: boom\n")
    other = tmp_path / "slurmkit-train-6017.out"
    other.write_text("not this one\n")
    old = tmp_path / "slurm-6016.out"
    old.write_text("before\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    files = failure_logs.output_files([tmp_path / "deep"], [tmp_path])
    assert sorted(p.name for p in files) == ["slurm-6016.out", "slurmkit-train-6016.out", "slurmkit-train-6017.out"]
    blocks = failure_logs.output_excerpts(files, {"6016"}, since=time.time() - 60)
    assert len(blocks) == 1 and blocks[0].startswith("==> %s (job output" % mine)
    assert "Traceback: boom" in blocks[0] and "line 59" not in blocks[0]


def test_the_section_is_bounded_and_never_raises(tmp_path, monkeypatch):
    log = tmp_path / "slurmctld.log"
    log.write_text("")
    before = failure_logs.offsets(tmp_path)
    log.write_text("".join("JobId=5 %s\n" % ("y" * 1900) for _ in range(200)))
    text = failure_logs.section(before, tmp_path, "JobId=5 failed", since=0)
    assert len(text) <= failure_logs.MAX_SECTION + 100 and text.startswith("(first ")

    def broken(*args):
        raise RuntimeError("disk gone")
    monkeypatch.setattr(failure_logs, "offsets", broken)
    assert failure_logs.section(before, tmp_path, "JobId=5", since=0) == "(cluster logs could not be read: disk gone)"


def test_the_container_images_kept_beside_the_clusters_are_not_their_logs(tmp_path):
    # An image's copy under the state directory is a whole root with build logs of its own: no cluster
    # said them, and a failing test's report must not be filled with debootstrap's lines.
    state = tmp_path / "state"
    (state / "alpha" / "ctld").mkdir(parents=True)
    (state / "images" / "debian-12" / "rootfs" / "tmp").mkdir(parents=True)
    (state / "alpha" / "ctld" / "slurmctld.log").write_text("x\n")
    (state / "images" / "debian-12" / "root.debootstrap.log").write_text("I: Configuring dash...\n")
    (state / "images" / "debian-12" / "rootfs" / "tmp" / "apt-install.log").write_text("Setting up\n")
    assert list(failure_logs.offsets(state)) == [str(state / "alpha" / "ctld" / "slurmctld.log")]
