"""The CLI: help everywhere, one-line errors with the right exit codes, render output."""

from pathlib import Path

import json
import click
import pytest

from slurmkit.cli.commands import cli

from harness import run_main

ROOT = Path(__file__).resolve().parents[2]
IB = str(ROOT / "site_configs" / "example-infiniband.yaml")


def _all_commands(group, prefix=()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command.hidden:
            continue       # an old name kept as an alias: test_an_old_command_name_... below
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from _all_commands(command, prefix + (name,))


def test_every_command_has_help_text(capsys):
    commands = list(_all_commands(cli))
    assert {"submit", "render", "status", "cancel", "wait", "templates", "topology", "clusters"} <= \
        {p[0] for p, _ in commands}
    assert {("site", "validate"), ("site", "show"), ("site", "trust")} <= {p for p, _ in commands}
    for path, command in commands:
        assert command.help and command.help.strip(), "command %s has no help text" % " ".join(path)
        code, out, _ = run_main(capsys, *path, "--help")
        assert code == 0 and "Usage: slurmkit " + " ".join(path) in out
        # Every command shows how it is used: an example with the real command line.
        assert "Example" in out and ("slurmkit " + " ".join(path)) in out.split("Example", 1)[1], \
            "command %s has no Example: in its help" % " ".join(path)
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, "option %s of %s has no help" % (param.opts, " ".join(path))


def test_an_old_command_name_is_hidden_says_the_new_one_and_does_the_same(capsys, tmp_path):
    note = "Note: 'slurmkit jobs' is now 'slurmkit daemon jobs'\n"
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "  daemon " in out and "  jobs " not in out
    journal = tmp_path / "requeue.db"
    new = run_main(capsys, "daemon", "jobs", "--all", "--json", "--journal", journal)
    old = run_main(capsys, "jobs", "--all", "--json", "--journal", journal)
    assert new == (0, "[]\n", "") and old == (0, "[]\n", note)
    new = run_main(capsys, "daemon", "jobs", "--journal", journal, "stop", "7")
    old = run_main(capsys, "jobs", "--journal", journal, "stop", "7")
    assert new[0] == 1 and "no tracked job 7" in new[2] and "`slurmkit daemon jobs` lists them" in new[2]
    assert old == (new[0], new[1], note + new[2])
    code, out, err = run_main(capsys, "jobs", "--help")
    assert code == 0 and err == note and "slurmkit daemon jobs stop 3 --cancel" in out


def test_render_prints_the_script(capsys):
    code, out, err = run_main(capsys, "render", "--site", IB, "-N", "2", "--comm", "heavy", "--switches", "1",
                         "--token", "tok", "--", "python", "train.py")
    assert code == 0 and err == ""
    assert out.startswith("#!/bin/bash\n") and "#SBATCH --switches=1@00:30:00" in out
    assert "#SBATCH --comment=slurmkit:tok" in out


def _one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("args,code,needle", [
    (["render", "--site", "nosuchsite", "--", "x"], 2, "nosuchsite"),
    (["render", "--site", IB, "-p", "nope", "--", "x"], 2, "choose one of: debug, gpu"),
    (["render", "--site", IB, "-M", "nope", "--", "x"], 2, "choose one of: hopper"),
    (["render", "--site", IB, "-T", "nope", "--", "x"], 2, "choose one of: single, srun, torchrun"),
    (["render", "--site", IB, "-N", "100", "--", "x"], 2, "asks for 100 nodes but partition gpu"),
    (["render", "--site", IB, "-t", "9-00:00:00", "--", "x"], 2, "time limit of partition gpu"),
    (["render", "--site", IB, "-t", "soon", "--", "x"], 2, "is not a valid Slurm time"),
    (["render", "--site", IB, "--comm", "heavy", "--", "x"], 2, "topology"),
    (["render", "--site", IB], 2, "Missing argument"),
    (["render", "--site", IB, "-e", "NOEQUALS", "--", "x"], 2, "KEY=VALUE"),
    (["render", "--site", IB, "--token", "bad token", "--", "x"], 2, "--token"),
    (["status", "--site", IB, "x:y"], 2, "not a job id"),
    (["bogus"], 2, "No such command"),
])
def test_bad_input_gives_one_error_line(capsys, monkeypatch, tmp_path, args, code, needle):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path))  # no cached topology of a real cluster
    got, out, err = run_main(capsys, *args)
    line = _one_error_line(err)
    assert got == code, err
    assert needle in line


def test_no_site_lists_available(capsys, monkeypatch):
    monkeypatch.delenv("SLURMKIT_SITE", raising=False)
    code, _, err = run_main(capsys, "render", "--", "x")
    assert code == 2 and "SLURMKIT_SITE" in _one_error_line(err) and "local" in err


def test_site_from_environment(capsys, monkeypatch):
    monkeypatch.setenv("SLURMKIT_SITE", IB)
    code, out, _ = run_main(capsys, "render", "--", "hostname")
    assert code == 0 and "cluster hopper" in out


@pytest.mark.parametrize("content,needle", [
    ("", "file is empty"),
    ("site: x\nclusters: [unclosed\n", ":2: invalid YAML"),
    ("site: x\nclusters:\n  a:\n    partitions:\n      gpu:\n        acelerator: nvidia\n", "accelerator"),
])
def test_bad_config_is_one_line_with_file_and_line(capsys, tmp_path, content, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, _, err = run_main(capsys, "render", "--site", str(path), "--", "x")
    assert code == 2
    line = _one_error_line(err)
    assert str(path) in line and needle in line


def test_site_validate_reports_every_problem(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("site: x\nclusters:\n  a:\n    partitions:\n      gpu:\n        accelerator: nvidiaa\n"
                    "        cpus_per_node: many\n")
    code, out, err = run_main(capsys, "site", "validate", str(path), IB)
    assert code == 2
    problems = [ln for ln in err.splitlines() if ln.startswith(str(path))]
    assert len(problems) >= 2
    assert any(":6:" in ln and "accelerator" in ln for ln in problems)
    assert any(":7:" in ln and "cpus_per_node" in ln for ln in problems)
    assert "%s: ok" % IB in out


def test_site_validate_shows_lint_warnings(capsys, tmp_path):
    path = tmp_path / "lint.yaml"
    path.write_text("site: x\nclusters:\n  a:\n    partitions:\n      gpu:\n        accelerator: nvidia\n"
                    "        gpu_model: a100\n        gpus_per_node: 8\n        cpus_per_node: 8\n"
                    "        fabric:\n          type: infiniband\n          hcas: [mlx5_1, mlx5_10]\n"
                    "          socket_ifname: ^docker0\n")
    code, out, err = run_main(capsys, "site", "validate", str(path))
    assert code == 0 and "ok" in out
    assert "'mlx5_1' has no '='" in err and "^docker0,lo" in err


def test_site_show_and_templates(capsys):
    code, out, _ = run_main(capsys, "site", "show", "--site", IB)
    assert code == 0 and "cluster hopper" in out and "NCCL_IB_HCA==mlx5_0:1" in out
    code, out, _ = run_main(capsys, "templates")
    assert code == 0
    assert {"torchrun", "srun", "single"} <= {ln.split()[0] for ln in out.splitlines()[1:]}


def test_every_cluster_option_is_the_shared_one_and_refuses_an_empty_value(capsys):
    from slurmkit.cli.options import text_value

    seen = []
    for path, command in _all_commands(cli):
        for param in command.params:
            if isinstance(param, click.Option) and "--cluster" in param.opts:
                assert param.opts == ["--cluster", "-M"] and param.callback is text_value, path
                seen.append(" ".join(path))
    assert {"submit", "render", "health check", "health sweep", "sweep submit"} <= set(seen)
    for path in ("health sweep", "health check", "sweep submit"):
        code, _, err = run_main(capsys, *path.split(), "--site", IB, "-M", "", *(["--", "x"] if "submit" in path else []))
        assert code == 2 and "must not be empty" in _one_error_line(err), (path, err)


def test_library_never_imports_click():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "slurmkit").rglob("*.py")
                 if "cli" not in p.parts and ("import click" in p.read_text() or "from click" in p.read_text())]
    assert offenders == []


def test_a_command_imports_only_its_own_module():
    import subprocess
    import sys

    code = ("import sys; from slurmkit.cli import main; main(['render', '--help']); "
            "print(sorted(m for m in sys.modules if m.startswith('slurmkit.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = out.strip().splitlines()[-1]
    assert "slurmkit.cli.job_commands" in loaded
    assert "slurmkit.cli.site_commands" not in loaded and "slurmkit.cli.cluster_commands" not in loaded


def test_job_ids_print_as_cluster_colon_id():
    from slurmkit.jobs import JobRef

    ref = JobRef("alpha", "42")
    assert str(ref) == "alpha:42" and "cancelled %s" % (ref,) == "cancelled alpha:42"


@pytest.mark.parametrize("words,cword,expected", [
    ("slurmkit su", 1, "plain,submit"),
    ("slurmkit submit --site lo", 3, "plain,local"),          # site names complete from the search path
    ("slurmkit site va", 2, "plain,validate"),
])
def test_shell_completion(words, cword, expected):
    import os
    import subprocess
    import sys

    env = dict(os.environ, _SLURMKIT_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=str(cword))
    out = subprocess.run([sys.executable, "-c", "from slurmkit.cli import run; run()"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and expected in out.stdout.split("\n"), out.stdout + out.stderr


def test_render_json_has_the_script_and_what_was_decided(capsys):
    code, out, err = run_main(capsys, "render", "--site", IB, "-N", "2", "--comm", "heavy", "--switches", "1",
                         "--token", "tok", "--json", "--", "python", "train.py")
    data = json.loads(out)
    assert code == 0 and data["switches"] == 1 and data["switch_wait"] and data["template"] == "torchrun"
    assert data["script"].startswith("#!/bin/bash") and "--switches=1@%s" % data["switch_wait"] in data["script"]
