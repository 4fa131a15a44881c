"""Bad input never loses, duplicates or misroutes a job (issue 11), without a cluster.

The corpus (``data/bad_input/corpus.json``) holds the cases that share one
shape: a command line that must end in exactly one ``Error:`` line naming the
option the value came from, with the right exit code and nothing on stdout;
and site files that must be refused at FILE:LINE.  The tests below it cover
the classes that need more than that: idempotency under concurrency, bounded
reads, what Slurm reads differently, the command line's end of options,
template failures, the render cache's token, stdout that cannot be written,
and messages.
"""

import errno
import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from slurmkit import jobs
from slurmkit.cli import debug_requested, main, undecodable_argument
from slurmkit.cli.options import StrictFloat, StrictInt
from slurmkit.errors import ConfigError, SlurmkitError, UsageError
from slurmkit.script import render as rendering
from slurmkit.script import templates
from slurmkit.site import load_site, validate_files
from slurmkit.site.loader import MAX_VALUES, SITE_FILE_LIMIT
from slurmkit.slurm.parsers import first_error_line
from slurmkit.testing import FakeSlurm, fake_session

from harness import one_error_line, run_main

ROOT = Path(__file__).resolve().parents[2]
LOCAL = str(ROOT / "site_configs" / "local.yaml")
CORPUS = json.loads((Path(__file__).parent / "data" / "bad_input" / "corpus.json").read_text())


def run(capsys, args):
    return run_main(capsys, *args)


# --------------------------------------------------------------------- the corpus

def test_the_corpus_has_several_cases_of_every_class():
    classes = {}
    for case in CORPUS["cli"] + CORPUS["site"]:
        classes[case["class"]] = classes.get(case["class"], 0) + 1
    assert len(CORPUS["cli"]) + len(CORPUS["site"]) >= 250
    assert all(count >= 3 for count in classes.values()), classes
    assert {"numbers", "text-values", "env", "time", "slurm-reading", "token", "job-ids", "command", "non-utf8",
            "config-values", "tags", "names", "bytes"} <= set(classes)


@pytest.mark.parametrize("case", CORPUS["cli"], ids=lambda c: "%s:%s" % (c["class"], ascii(c["args"][3:])[:60]))
def test_cli_case_is_one_error_line_naming_the_option(case, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    args = [a.replace("{SITE}", LOCAL).replace("{MARKER}", str(marker)) for a in case["args"]]
    code, out, err = run(capsys, args)
    line = one_error_line(err)
    assert code == case["code"], err
    assert case["needle"] in line
    if "needle2" in case:
        assert case["needle2"] in line
    assert out == ""                      # nothing rendered, nothing submitted
    assert not marker.exists()


@pytest.mark.parametrize("case", CORPUS["site"], ids=lambda c: "%s:%s" % (c["class"], c["needle"]))
def test_site_case_is_refused_at_its_line(case, capsys, tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(case["text"], encoding="utf-8")
    problems = validate_files([str(path)])
    assert problems, "accepted: %r" % case["text"]
    first = problems[0]
    assert (first.file, first.line) == (str(path), case["line"]) and case["needle"] in first.message, problems
    assert all("\n" not in str(p) for p in problems)               # each problem is one line
    code, out, err = run(capsys, ["render", "--site", str(path), "--", "true"])
    line = one_error_line(err)
    assert code == 2 and line.startswith("Error: %s:%d: " % (path, case["line"])) and out == ""


# --------------------------------------------------------------------- strict numbers

@pytest.mark.parametrize("text,value", [("0", 0), ("7", 7), ("+3", 3), ("0012", 12)])
def test_strict_int_takes_ascii_digits(text, value):
    assert StrictInt(min=0).convert(text, None, None) == value


@pytest.mark.parametrize("text,value", [("1.5", 1.5), ("0", 0.0), (".5", 0.5), ("1e2", 100.0), ("3600", 3600.0)])
def test_strict_float_takes_finite_decimals(text, value):
    assert StrictFloat(min=0).convert(text, None, None) == value


# --------------------------------------------------------------------- idempotency under concurrency

class SlowSubmit(FakeSlurm):
    """Time between 'no job with this token' and sbatch: where a second submission would slip in."""

    def submit(self, script, token=None):
        time.sleep(0.02)
        return super().submit(script, token)


SPEC = rendering.JobSpec(command=("python", "train.py"), nodes=1, gpus_per_node=1, time="00:10:00")


def _parallel_submits(session, count, token):
    results, errors = [], []

    def one():
        try:
            results.append(jobs.submit(session, SPEC._replace(token=token)))
        except Exception as exc:  # collected: the assertion shows it
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def test_parallel_submits_with_one_token_make_one_job_and_report_it(tmp_path):
    alpha = SlowSubmit("alpha", nodes=["an1"])
    session = fake_session(alpha=alpha)
    results, errors = _parallel_submits(session, 20, "same-1")
    assert errors == []
    assert len(alpha.table) == 1                                   # one job ...
    assert {r.ref for r in results} == {jobs.JobRef("alpha", "1000")}
    assert sum(not r.existed for r in results) == 1                # ... created once, reported 19 times
    assert alpha.methods_called().count("submit") == 1


def test_without_the_lock_the_same_race_makes_duplicates(monkeypatch):
    # The control experiment: the test above fails when check and sbatch are not one critical section.
    class NoLock:
        def __init__(self, *args, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(jobs, "token_lock", NoLock)
    alpha = SlowSubmit("alpha", nodes=["an1"])
    _parallel_submits(fake_session(alpha=alpha), 10, "same-2")
    assert len(alpha.table) > 1


def test_different_tokens_and_clusters_do_not_wait_for_each_other(tmp_path):
    with jobs.token_lock("alpha", "t1", wait=0.2):
        with jobs.token_lock("alpha", "t2", wait=0.2), jobs.token_lock("beta", "t1", wait=0.2):
            pass
        with pytest.raises(SlurmkitError, match="another submission with token t1 to cluster alpha"):
            with jobs.token_lock("alpha", "t1", wait=0.2):
                pass
    with jobs.token_lock("alpha", "t1", wait=0.2):   # released: free again
        pass


def test_the_lock_file_is_private_and_removed(tmp_path):
    with jobs.token_lock("alpha", "t3") as lock:
        info = os.stat(lock.path)
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid()
        assert os.path.dirname(lock.path).startswith(os.environ["SLURMKIT_CACHE_DIR"])
    assert not os.path.exists(lock.path)


def test_a_lock_file_that_is_a_symlink_is_never_followed(tmp_path):
    target = tmp_path / "elsewhere"
    lock = jobs.token_lock("alpha", "t4")
    os.makedirs(os.path.dirname(lock._path()), exist_ok=True)
    os.symlink(target, lock._path())
    with pytest.raises(OSError):
        with lock:
            pass
    assert not target.exists()


def test_another_users_job_with_the_same_token_does_not_stand_in_for_yours():
    alpha = FakeSlurm("alpha", nodes=["an1"])
    theirs = alpha.add_job(state="RUNNING", comment="slurmkit:run-7", user="mallory")
    mine = jobs.submit(fake_session(alpha=alpha), SPEC._replace(token="run-7"))
    assert mine.ref.job_id != theirs and not mine.existed and len(alpha.table) == 2
    again = jobs.submit(fake_session(alpha=alpha), SPEC._replace(token="run-7"))
    assert again.ref == mine.ref and again.existed


def test_a_fresh_token_is_submitted_without_a_look(tmp_path):
    alpha = FakeSlurm("alpha", nodes=["an1"])
    jobs.submit(fake_session(alpha=alpha), SPEC)
    assert alpha.methods_called() == ["submit"]


# --------------------------------------------------------------------- output files Slurm could not create

@pytest.mark.parametrize("pattern,needle", [
    ("missing/out-%j.log", "directory {tmp}/missing does not exist"),
    ("{tmp}/a/b/c.out", "directory {tmp}/a/b does not exist"),
    ("subdir", "names a directory"),
    ("{tmp}/subdir/", "names a directory"),
    (".", "names a directory"),
    ("afile/x.out", "is not a directory"),
    ("%u-dir/x-%j.out", "directory {tmp}/{user}-dir does not exist"),
    ("%x/x-%j.out", "directory {tmp}/exp/lr does not exist"),
])
def test_an_output_slurm_could_not_create_is_refused(tmp_path, pattern, needle):
    import getpass

    (tmp_path / "subdir").mkdir()
    (tmp_path / "afile").write_text("")
    problem = jobs.output_place_problem(pattern.replace("{tmp}", str(tmp_path)), str(tmp_path), "exp/lr")
    assert problem and needle.format(tmp=tmp_path, user=getpass.getuser()) in problem
    assert "--output/-o" in problem


@pytest.mark.parametrize("pattern", ["out-%j.log", "subdir/%x-%j.out", "%N/out", "subdir/%%j-literal",
                                     "logs-%j/out", "{tmp}/subdir/x.out", "sub\\dir/x"])
def test_an_output_that_can_be_created_or_depends_on_the_job_passes(tmp_path, pattern):
    (tmp_path / "subdir").mkdir()
    (tmp_path / "sub").mkdir()
    assert jobs.output_place_problem(pattern.replace("{tmp}", str(tmp_path)), str(tmp_path), "exp") is None


def test_a_directory_that_cannot_be_reached_is_said_so(tmp_path):
    os.symlink("loop", tmp_path / "loop")                          # stat() fails with ELOOP, not ENOENT
    problem = jobs.output_place_problem(str(tmp_path / "loop" / "x.out"), str(tmp_path))
    assert "directory %s/loop cannot be reached" % tmp_path in problem


def test_an_unwritable_working_directory_is_refused(tmp_path, monkeypatch):
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real_access(p, mode))
    problem = jobs.output_place_problem("slurmkit-x-%j.out", str(tmp_path))
    assert "working directory %s is not writable" % tmp_path in problem and "--output/-o" in problem
    assert "directory %s is not writable" % tmp_path in jobs.output_place_problem(str(tmp_path) + "/x", "/")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")
def test_a_working_directory_on_a_kernel_file_system_is_refused_whatever_access_says():
    # As root access(2) says /proc is writable; Slurm then failed such a job at launch
    # (JobLaunchFailure, ExitCode 0:53) after slurmkit had reported it submitted.
    problem = jobs.output_place_problem("slurmkit-x-%j.out", "/proc")
    assert problem.startswith("the working directory /proc ")
    assert ("takes no new files" in problem or "is not writable by you" in problem) and "--output/-o" in problem
    assert "--output/-o /proc/x: directory /proc " in jobs.output_place_problem("/proc/x", "/tmp")


@pytest.mark.parametrize("code, needle", [(errno.EROFS, "is on a read-only file system"),
                                          (errno.ENOSPC, "is on a full file system"),
                                          (errno.EIO, "takes no new files (Input/output error)")])
def test_a_directory_that_takes_no_new_file_is_refused_with_why(tmp_path, monkeypatch, code, needle):
    real_open = os.open

    def refusing(path, flags, *mode):
        if os.path.dirname(str(path)) == str(tmp_path) and flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), path)
        return real_open(path, flags, *mode)
    monkeypatch.setattr(os, "open", refusing)
    problem = jobs.output_place_problem("slurmkit-x-%j.out", str(tmp_path))
    assert problem == ("the working directory %s %s, so Slurm could not create the job's output file there; "
                       "run from a directory you can write, or give --output/-o a path in one" % (tmp_path, needle))


def test_the_probe_leaves_nothing_behind(tmp_path):
    assert jobs.output_place_problem("slurmkit-x-%j.out", str(tmp_path)) is None
    assert list(tmp_path.iterdir()) == []


def test_a_removed_working_directory_is_refused_before_sbatch(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    alpha = FakeSlurm("alpha", nodes=["an1"])
    with pytest.raises(UsageError, match="the working directory cannot be used"):
        jobs.submit(fake_session(alpha=alpha), SPEC)
    assert alpha.table == {}


def test_templates_lists_an_unreadable_template_without_failing(tmp_path, capsys):
    site = _site_with_template(tmp_path, {"latin.sh.j2": b"{# caf\xe9 #}\n"})
    path = templates.available_templates(site)["latin"]
    assert templates.template_description(path).startswith("(unreadable: not UTF-8")


def test_submit_refuses_before_sbatch_on_a_local_cluster(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    alpha = FakeSlurm("alpha", nodes=["an1"])
    session = fake_session(alpha=alpha)
    for output in ("nodir/x-%j.out", str(tmp_path)):
        with pytest.raises(UsageError, match="--output/-o") as caught:
            jobs.submit(session, SPEC._replace(output=output, token="out-1"))
        assert caught.value.exit_code == 2
    assert alpha.calls == [] and alpha.table == {}                 # nothing asked of Slurm, nothing created
    assert jobs.submit(session, SPEC._replace(output="ok-%j.out")).ref.cluster == "alpha"


# --------------------------------------------------------------------- what Slurm reads differently

def _local_site():
    return load_site(LOCAL)


def _render(spec, partition="cpu"):
    site = _local_site()
    cluster = site.cluster("alpha")
    return rendering.render(site, cluster, site.partition(cluster, partition), spec)


CPU = rendering.JobSpec(command=("true",), template="single", token="t")


@pytest.mark.parametrize("zero", ["0", "00:00:00", "0-0", "0:00"])
def test_time_zero_is_no_limit_to_slurm_said_as_such(zero):
    rendered = _render(CPU._replace(time=zero))          # cpu: UNLIMITED partition, so it fits
    assert any("no time limit to Slurm" in w for w in rendered.warnings)
    with pytest.raises(UsageError, match="Slurm reads as no time limit"):
        _render(CPU._replace(time=zero, gpus_per_node=1), partition="gpu")   # gpu: 24:00:00 limit


def test_a_site_default_time_that_does_not_fit_is_named_as_the_sites():
    site = _local_site()
    site = site._replace(defaults=site.defaults._replace(time="0"))
    cluster = site.cluster("alpha")
    with pytest.raises(UsageError, match=r"the site's default time 0 \(defaults.time\), which Slurm reads as no"):
        rendering.render(site, cluster, site.partition(cluster, "gpu"), CPU._replace(gpus_per_node=1))


@pytest.mark.parametrize("switches", [1, 2, 7])
def test_switches_without_heavy_are_refused_not_dropped(switches):
    with pytest.raises(UsageError, match="applies to --comm heavy only"):
        _render(CPU._replace(switches=switches))
    heavy = _render(CPU._replace(switches=switches, comm="heavy"))
    assert "#SBATCH --switches=%d@" % switches in heavy.script


@pytest.mark.parametrize("name", ["SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURMD_NODENAME", "IFS",
                                  "BASH_ENV", "SHELLOPTS"])
def test_variables_slurm_or_the_shell_own_are_refused_by_the_library_too(name):
    with pytest.raises(UsageError, match="--env: %s" % name):
        _render(CPU._replace(env={name: "7"}))


@pytest.mark.parametrize("name", ["SRUN_CPUS_PER_TASK", "SLURMKIT_TAG", "MY_SLURM_JOB_ID", "NCCL_DEBUG"])
def test_other_variables_pass(name):
    assert "export %s=7" % name in _render(CPU._replace(env={name: "7"})).script


def test_a_repeated_env_is_a_warning(capsys):
    code, out, err = run(capsys, ["render", "--site", LOCAL, "-p", "cpu", "-T", "single", "-e", "A=1", "-e", "A=2",
                                  "--", "true"])
    assert code == 0 and "export A=2" in out and "export A=1" not in out
    assert "Warning: --env A given twice ('1', then '2'); the last one is used" in err


# --------------------------------------------------------------------- the end of slurmkit's options

def _render_cli(capsys, *args):
    code, out, err = run(capsys, ["render", "--site", LOCAL, "-p", "cpu", "--token", "t", *args])
    assert code == 0, err
    return out


def test_options_after_the_program_belong_to_the_program(capsys):
    out = _render_cli(capsys, "-T", "single", "python3", "train.py", "-c", "2", "-N", "3", "--json", "--debug")
    assert "exec -- python3 train.py -c 2 -N 3 --json --debug\n" in out
    assert "--cpus-per-task" not in out and "#SBATCH --nodes=1" in out and out.startswith("#!/bin/bash")


def test_options_before_the_program_and_double_dash_still_work(capsys):
    out = _render_cli(capsys, "-T", "single", "-c", "2", "--", "python3", "train.py", "--", "-c")
    assert "#SBATCH --cpus-per-task=2" in out and "exec -- python3 train.py -- -c\n" in out
    code, out, _ = run(capsys, ["render", "--help"])
    assert code == 0 and "Options end at the first word of the command" in out
    code, out, _ = run(capsys, ["submit", "-h"])
    assert code == 0 and "Usage: slurmkit submit" in out


def test_help_after_the_program_is_the_programs(capsys):
    out = _render_cli(capsys, "-T", "single", "python3", "--help")
    assert "exec -- python3 --help\n" in out


@pytest.mark.parametrize("template,needle", [
    ("single", "exec -- -weird arg\n"),
    ("srun", "srun --kill-on-bad-exit=1 -- -weird arg\n"),
    ("torchrun", "--no-python -- -weird arg\n"),
])
def test_a_command_starting_with_a_dash_is_not_read_as_the_launchers_option(capsys, template, needle):
    assert needle in _render_cli(capsys, "-T", template, "--", "-weird", "arg")


def test_torchrun_itself_reads_the_dash_command_as_the_program():
    run_module = pytest.importorskip("torch.distributed.run")
    launch = rendering.launcher_command(("-weird", "--lr", "1"))
    args = run_module.get_args_parser().parse_args(["--no-python", *launch.args])
    assert (args.training_script, args.training_script_args) == ("-weird", ["--lr", "1"])


@pytest.mark.parametrize("args,debug", [
    (["--debug", "render"], True), (["--site", "x", "--debug", "submit"], True),
    (["--site", "--debug", "render"], False),            # "--debug" is --site's value here
    (["render", "--debug"], False), (["submit", "--", "python", "x.py", "--debug"], False),
    (["--", "--debug"], False), ([], False),
])
def test_debug_is_only_the_groups_own_option(args, debug):
    assert debug_requested(args) is debug


def test_debug_inside_the_command_does_not_turn_errors_into_tracebacks(capsys):
    code, _, err = run(capsys, ["render", "--site", LOCAL, "-p", "nope", "--", "python", "x.py", "--debug"])
    assert code == 2 and "unknown partition" in one_error_line(err)


# --------------------------------------------------------------------- non-UTF-8 arguments

@pytest.mark.parametrize("args,expected", [
    (["a", "b\udcff"], (2, "b\\xff")), (["\udce9t\udce9"], (1, "\\xe9t\\xe9")), (["ok", "fine", "é"], None),
    (["--", "x\udc80y"], (2, "x\\x80y")),
])
def test_an_argument_that_is_not_utf8_is_found_with_its_position(args, expected):
    assert undecodable_argument(args) == expected


# --------------------------------------------------------------------- cancel, stdout

def test_cancel_cancels_only_live_jobs_and_reports_the_rest(tmp_path):
    alpha = FakeSlurm("alpha", nodes=["an1", "an2"])
    running = alpha.add_job(state="RUNNING")
    done = alpha.add_job(state="COMPLETED")
    report = jobs.cancel_known(fake_session(alpha=alpha), [jobs.JobRef("alpha", running), jobs.JobRef("alpha", done),
                                                           jobs.JobRef("alpha", "999999")])
    assert report.cancelled == [jobs.JobRef("alpha", running)]
    assert report.ended == [(jobs.JobRef("alpha", done), "COMPLETED")]
    assert report.missing == [jobs.JobRef("alpha", "999999")]
    assert [c.args[0] for c in alpha.calls if c.method == "cancel"] == [[running]]
    assert alpha.table[running].state == "CANCELLED"


def test_cancel_still_cancels_live_jobs_when_accounting_does_not_answer():
    from slurmkit.errors import SlurmUnavailableError

    alpha = FakeSlurm("alpha", nodes=["an1"], accounting=True)
    running = alpha.add_job(state="RUNNING")
    alpha.fail_next("accounting", SlurmUnavailableError("slurmdbd on cluster alpha does not answer"))
    report = jobs.cancel_known(fake_session(alpha=alpha), [jobs.JobRef("alpha", running),
                                                           jobs.JobRef("alpha", "999999")])
    assert report.cancelled == [jobs.JobRef("alpha", running)] and report.missing == [jobs.JobRef("alpha", "999999")]
    assert alpha.table[running].state == "CANCELLED"


def test_cancel_with_nothing_alive_runs_no_scancel():
    alpha = FakeSlurm("alpha", nodes=["an1"])
    report = jobs.cancel_known(fake_session(alpha=alpha), [jobs.JobRef("alpha", "424242")])
    assert report.missing == [jobs.JobRef("alpha", "424242")] and "cancel" not in alpha.methods_called()


class FullStdout:
    """A stdout on a full disk."""

    encoding = "utf-8"

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def isatty(self):
        return False


def test_a_submitted_job_whose_id_cannot_be_printed_is_named_on_stderr(capsys, monkeypatch):
    from slurmkit import federation
    from slurmkit.jobs import JobRef, Submission

    rendered = rendering.RenderedJob("#!/bin/bash\n", (), "single", "alpha", "cpu", None)
    monkeypatch.setattr(federation, "submit_anywhere", lambda *a, **k: federation.SubmitOutcome(
        Submission(JobRef("alpha", "4711"), rendered, "tok")))
    for extra in ([], ["--json"]):
        monkeypatch.setattr("sys.stdout", FullStdout())
        code = main(["submit", "--site", LOCAL, "-p", "cpu", "-T", "single", *extra, "--", "true"])
        err = capsys.readouterr().err
        line = one_error_line(err)
        assert code == 1 and "job alpha:4711 was submitted" in line and "No space left on device" in line


@pytest.mark.parametrize("state,reason,exit_code,signal,expected", [
    ("FAILED", "NonZeroExitCode", 3, None, "FAILED (exit code 3)"),
    ("FAILED", "JobLaunchFailure", None, None, "FAILED (reason JobLaunchFailure)"),
    ("NODE_FAIL", "NodeDown", None, None, "NODE_FAIL (reason NodeDown)"),
    ("CANCELLED", "None", None, 15, "CANCELLED (signal 15)"),
    ("TIMEOUT", "TimeLimit", None, 15, "TIMEOUT (signal 15, reason TimeLimit)"),
])
def test_wait_says_why_a_job_failed_and_marks_a_missing_output(state, reason, exit_code, signal, expected):
    from slurmkit.cli import display

    summary = {"id": "alpha:7", "state": state, "reason": reason, "exit_code": exit_code, "signal": signal,
               "nodelist": "an1", "leaf_switches": ["leaf1"], "stdout": "/x/o-7.out",
               "output_note": "output file /x/o-7.out does not exist"}
    text = display.wait_text(summary)
    assert text.startswith("alpha:7 %s on an1" % expected) and text.endswith("output: /x/o-7.out (missing)")
    assert display.wait_text(dict(summary, output_note=None)).endswith("output: /x/o-7.out")


class ClosedPipe(FullStdout):
    def write(self, text):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_a_submitted_job_whose_id_meets_a_closed_pipe_is_named_on_stderr(capsys, monkeypatch):
    from slurmkit import federation
    from slurmkit.jobs import JobRef, Submission

    rendered = rendering.RenderedJob("#!/bin/bash\n", (), "single", "alpha", "cpu", None)
    monkeypatch.setattr(federation, "submit_anywhere", lambda *a, **k: federation.SubmitOutcome(
        Submission(JobRef("alpha", "4712"), rendered, "tok")))
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    code = main(["submit", "--site", LOCAL, "-p", "cpu", "-T", "single", "--", "true"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and "job alpha:4712 was submitted" in line and "Broken pipe" in line


def test_any_answer_that_cannot_be_written_is_one_error_line(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout", FullStdout())
    code = main(["render", "--site", LOCAL, "-p", "cpu", "-T", "single", "--", "true"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and "could not write the output: No space left on device" in line


# --------------------------------------------------------------------- bounded reads

def _timed_validate(path, clock=time.monotonic):
    start = clock()
    problems = validate_files([str(path)])
    return problems, clock() - start


def test_a_fifo_answers_at_once(tmp_path):
    fifo = tmp_path / "site.yaml"
    os.mkfifo(fifo)
    problems, took = _timed_validate(fifo)
    assert took < 1.0 and "FIFO" in problems[0].message


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_answers_at_once(device):
    problems, took = _timed_validate(device)
    assert took < 1.0 and "device" in problems[0].message


def test_a_directory_and_a_huge_file_are_refused(tmp_path):
    assert "directory" in validate_files([str(tmp_path)])[0].message
    huge = tmp_path / "huge.yaml"
    huge.write_text("site: t\n" + "# padding\n" * (SITE_FILE_LIMIT // 10 + 1))
    problems, took = _timed_validate(huge)
    assert took < 1.0 and "refused" in problems[0].message


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"site: t\ndescription: caf\xe9\n")
    problem = validate_files([str(path)])[0]
    assert problem.line == 2 and "not UTF-8" in problem.message


def _merge_bomb(depth):
    lines = ["x-a0: &a0 {cluster: a}"] + ["x-a%d: &a%d {<<: [*a%d, *a%d]}" % (i, i, i - 1, i - 1)
                                         for i in range(1, depth)]
    return "\n".join(lines) + "\ndefaults:\n  <<: [*a%d, *a%d]\n" % (depth - 1, depth - 1)


BASE = CORPUS["site"][0]["text"].replace("price_per_gpu_hour: .nan", "price_per_gpu_hour: 1.5")


@pytest.mark.parametrize("text,needle", [
    (_merge_bomb(60) + BASE.replace("site: t\n", "site: t\n", 1), None),         # 2**60 merges, expanded once
    ("site: t\nx-l: &l [a, b, c]\nmodules: [" + ", ".join(["*l"] * 2000) + "]\n" + BASE[8:], "expected a string"),
    ("defaults: &d\n  <<: *d\n" + BASE, "merges itself"),
    ("site: t\nx-p: &p {accelerator: none, cpus_per_node: 1}\nx-ps: &ps\n"
     + "\n".join("  p%d: *p" % i for i in range(3000)) + "\nx-c: &c {partitions: *ps}\nclusters:\n"
     + "\n".join("  c%d: *c" % i for i in range(3000)) + "\n", "alias bomb"),
])
def test_alias_and_merge_bombs_answer_within_a_second(tmp_path, text, needle):
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    # CPU time: the work is what is bounded (a loaded test machine stretches the wall clock; the
    # integration tests time whole CLI runs by the wall clock).
    problems, took = _timed_validate(path, clock=time.process_time)
    assert took < 1.0
    if needle is None:
        assert problems == []                                     # a deep merge chain is valid, and cheap
        assert load_site(str(path)).defaults.cluster == "a"
    else:
        assert problems and needle in problems[0].message


def test_the_value_cap_is_far_above_a_real_site():
    assert MAX_VALUES >= 50000
    assert validate_files([str(p) for p in (ROOT / "site_configs").glob("*.yaml")]) == []


# --------------------------------------------------------------------- templates

def _site_with_template(tmp_path, files):
    tdir = tmp_path / "templates"
    tdir.mkdir()
    for name, content in files.items():
        path = tdir / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    site = _local_site()
    return site._replace(template_dirs=(str(tdir),))


@pytest.mark.parametrize("files,needle", [
    ({"mine.sh.j2": '{% include "_nowhere.sh.j2" %}'}, "includes or extends '_nowhere.sh.j2'"),
    ({"mine.sh.j2": '{% extends "mine.sh.j2" %}'}, "extends or includes itself"),
    ({"mine.sh.j2": '{% include "_a.sh.j2" %}', "_a.sh.j2": '{% include "mine.sh.j2" %}'},
     "extends or includes itself"),
    ({"mine.sh.j2": "#!/bin/bash\n{{ 1 // 0 }}\n"}, "ZeroDivisionError"),
    ({"mine.sh.j2": "#!/bin/bash\n\n{{ name.nope() }}\n"}, "mine.sh.j2 line 3"),
    ({"mine.sh.j2": "{{ nothing_like_this }}"}, "undefined value"),
    ({"mine.sh.j2": "{% if %}"}, "mine.sh.j2 line 1"),
    ({"mine.sh.j2": b"#!/bin/bash\n# caf\xe9\n"}, "mine.sh.j2:2: not UTF-8"),
    ({"mine.sh.j2": '{% include "_big.sh.j2" %}', "_big.sh.j2": "#" * (templates.TEMPLATE_LIMIT + 1)},
     "refused"),
    ({"mine.sh.j2": "#!/bin/bash\necho hi\n{% for d in directives %}#SBATCH {{ d }}\n{% endfor %}"},
     "before #SBATCH --job-name"),
])
def test_every_template_failure_is_one_config_error(tmp_path, capsys, files, needle):
    site = _site_with_template(tmp_path, files)
    cluster = site.cluster("alpha")
    with pytest.raises(ConfigError) as caught:
        rendering.render(site, cluster, site.partition(cluster, "cpu"), CPU._replace(template="mine"))
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_an_included_fifo_answers_at_once(tmp_path):
    site = _site_with_template(tmp_path, {"mine.sh.j2": '{% include "_fifo.sh.j2" %}'})
    os.mkfifo(tmp_path / "templates" / "_fifo.sh.j2")
    os.mkfifo(tmp_path / "templates" / "pipe.sh.j2")
    assert "pipe" not in templates.available_templates(site)       # never offered, never read
    cluster = site.cluster("alpha")
    start = time.monotonic()
    with pytest.raises(ConfigError, match="FIFO"):
        rendering.render(site, cluster, site.partition(cluster, "cpu"), CPU._replace(template="mine"))
    assert time.monotonic() - start < 1.0


def test_a_site_name_with_a_newline_cannot_cut_the_header(tmp_path):
    # Belt and braces behind the loader: even a Site built in code cannot push #SBATCH lines out of reach.
    site = _local_site()._replace(name="local\nhostname")
    cluster = site.cluster("alpha")
    with pytest.raises(ConfigError, match="sbatch would ignore it"):
        rendering.render(site, cluster, site.partition(cluster, "cpu"), CPU)


# --------------------------------------------------------------------- the render cache's token

@pytest.mark.parametrize("argument", [
    "SLURMKIT-TOKEN-PLACEHOLDER", "slurmkit-cache-placeholder-", "#SBATCH --comment=slurmkit:t",
    "--comment=slurmkit:abc", "slurmkit:t",
])
def test_a_users_argument_is_never_altered_by_the_cache(argument):
    from slurmkit.script.cache import render_cached

    site = _local_site()
    cluster = site.cluster("alpha")
    part = site.partition(cluster, "cpu")
    spec = CPU._replace(command=("echo", argument), token="tok-A")
    for token in ("tok-A", "tok-B", "tok-B"):                      # a miss, then hits
        got = render_cached(site, cluster, part, spec._replace(token=token), None, rendering.render)
        fresh = rendering.render(site, cluster, part, spec._replace(token=token))
        assert got.script == fresh.script
        assert got.script.count("#SBATCH --comment=slurmkit:%s\n" % token) == 1


def test_a_template_printing_the_token_twice_is_rendered_fresh(tmp_path):
    from slurmkit.script.cache import render_cached

    site = _site_with_template(tmp_path, {"mine.sh.j2": '{% extends "single.sh.j2" %}{% block template_name %}'
                                                        'mine {{ job.token }}{% endblock %}'})
    (tmp_path / "templates" / "single.sh.j2").symlink_to(ROOT / "templates" / "single.sh.j2")
    (tmp_path / "templates" / "_base.sh.j2").symlink_to(ROOT / "templates" / "_base.sh.j2")
    cluster = site.cluster("alpha")
    part = site.partition(cluster, "cpu")
    for token in ("first", "second"):
        got = render_cached(site, cluster, part, CPU._replace(template="mine", token=token), None, rendering.render)
        assert got.script.count(token) == 2 and "placeholder" not in got.script


# --------------------------------------------------------------------- messages

@pytest.mark.parametrize("stderr,expected", [
    ("squeue: error: s_p_parse_file: cannot stat file /x/slurm.conf: No such file or directory\n"
     "squeue: error: ClusterName needs to be specified\nsqueue: fatal: Unable to process configuration file\n",
     "s_p_parse_file: cannot stat file /x/slurm.conf: No such file or directory (Unable to process configuration "
     "file)"),
    ("sbatch: error: Invalid partition name specified\n", "Invalid partition name specified"),
    ("sbatch: error: CPU count per node can not be satisfied\nsbatch: error: Batch job submission failed: "
     "Requested node configuration is not available\n", "CPU count per node can not be satisfied (Batch job "
                                                        "submission failed: Requested node configuration is not "
                                                        "available)"),
    ("sbatch: warning: something\nsbatch: error: same\nsbatch: error: same\n", "same"),
    ('squeue: s_p_parse_file: file "/x/slurm.conf" is empty\nsqueue: error: ClusterName needs to be specified\n'
     "squeue: fatal: Unable to process configuration file\n",
     's_p_parse_file: file "/x/slurm.conf" is empty (Unable to process configuration file)'),
    ("Traceback (most recent call last):\n  File x\nValueError: bad\n", "ValueError: bad"),
    ("sh: 1: sbatch: not found\n", "1: sbatch: not found"),
    ("sbatch: fatal: Invalid --time specification\n", "Invalid --time specification"),
    ("", "(no message)"),
    ("x" * 1000, "x" * 397 + "..."),
])
def test_first_error_line_keeps_the_cause(stderr, expected):
    assert first_error_line(stderr) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1, "soon"])
def test_the_ssh_runner_refuses_a_bad_timeout_before_connecting(value):
    from slurmkit.remote.runner import SSHRunner
    from slurmkit.site.model import LoginNode

    runner = SSHRunner(LoginNode(host="127.0.0.1", port=9, connect_timeout=1.0, command_timeout=value), "alpha")
    with pytest.raises(ConfigError, match="command timeout must be a positive number"):
        runner.run(["true"])
    assert runner.transport() is None                               # no connection was attempted


def test_a_nan_price_ranks_last_not_first():
    from datetime import datetime

    from slurmkit.federation.planner import Candidate

    now = datetime(2024, 1, 1, 12, 0)
    nan = Candidate("a", "p", 0, estimate=now, price=float("nan"))
    cheap = Candidate("b", "p", 1, estimate=now, price=9.0)
    assert sorted([nan, cheap], key=Candidate.rank_key) == [cheap, nan]
