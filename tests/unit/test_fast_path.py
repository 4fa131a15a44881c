"""The entry point's fast path (slurmkit/cli/fast.py) against the click commands it stands in for.

The click commands are the reference: for an argv the fast path serves, it must hand the command's
body exactly what click would (same parameters, same values); for any argv it does not fully
understand it must step aside; and the whole command must print the same and exit the same either way.
"""

import os
from pathlib import Path

import click
import pytest

from slurmkit.cli import fast, main
from slurmkit.cli.commands import cli

ROOT = Path(__file__).resolve().parents[2]
IB = str(ROOT / "site_configs" / "example-infiniband.yaml")

SERVED = [
    ["status"],
    ["status", "alpha:12", "beta:7", "--json"],
    ["status", "--site", IB, "-u", "ada", "12"],
    ["status", "--user=ada", "--site=" + IB, "--user", "bob"],          # the last one wins, as in click
    ["logs", "-n", "20", "alpha:12"],
    ["logs", "alpha:12_3", "--lines=0", "-f", "--err", "--rank", "1", "--attempt", "2", "--journal", "j.db"],
    ["logs", "--site", IB, "12"],
    ["why", "--here", "alpha:12"],
    ["why", "--json", "--journal=j.db", "alpha:12", "--site", IB],
    ["eff", "alpha:12"],
    ["eff", "--json", "--journal", "j.db", "--site=" + IB, "12_3"],
]

LEFT_TO_CLICK = [
    [], ["--help"], ["status", "--help"], ["status", "-h"], ["logs", "--help"], ["--debug", "status"],
    ["--site", IB, "status"], ["render", "--", "x"], ["status", "--", "12"], ["status", "--bogus"],
    ["status", "-u", ""], ["status", "-u", " ada"], ["status", "-u"], ["status", "--site"], ["status", "--json=1"],
    ["status", "-uada"], ["logs"], ["logs", "1", "2"], ["logs", "-n", "x", "1"], ["logs", "-n", "-1", "1"],
    ["logs", "--attempt", "0", "1"], ["logs", "-n", " 2", "1"], ["logs", "-fn", "2", "1"], ["why"],
    ["why", "--here", "--", "1"], ["status", "--site", "--json"], ["eff"], ["eff", "1", "2"], ["eff", "--here", "1"],
    ["eff", "--json=yes", "1"],
]


def click_params(argv):
    """What click hands the command's body for ``argv``: its parameters, --site resolved."""
    command = cli.get_command(None, argv[0])
    with click.Context(cli, info_name="slurmkit") as parent:
        ctx = command.make_context(argv[0], list(argv[1:]), parent=parent)
    return dict(ctx.params)


@pytest.mark.parametrize("argv", SERVED)
def test_the_fast_path_hands_the_body_what_click_would(argv, monkeypatch):
    monkeypatch.delenv("SLURMKIT_SITE", raising=False)
    monkeypatch.delenv("SLURMKIT_JOURNAL", raising=False)
    parsed = fast.parse(argv)
    assert parsed is not None and parsed[0] == argv[0]
    assert parsed[1] == click_params(argv)


def test_environment_defaults_are_clicks(monkeypatch):
    monkeypatch.setenv("SLURMKIT_SITE", IB)
    monkeypatch.setenv("SLURMKIT_JOURNAL", "/tmp/j.db")
    for argv in (["logs", "1"], ["why", "1"], ["eff", "1"], ["status"], ["status", "--site", "other"]):
        assert fast.parse(argv)[1] == click_params(argv)


@pytest.mark.parametrize("argv", LEFT_TO_CLICK)
def test_what_the_fast_path_does_not_fully_understand_goes_to_click(argv):
    assert fast.parse(argv) is None


def test_shell_completion_goes_to_click(monkeypatch):
    monkeypatch.setenv("_SLURMKIT_COMPLETE", "bash_complete")
    assert fast.serve(["status"]) is None and fast.serve(["--help"]) is None


@pytest.mark.parametrize("name", sorted(fast.COMMANDS))
def test_the_fast_path_knows_every_parameter_and_spelling_of_the_command(name):
    """A new option on the click command must be taught here too: else its parameter would be missing."""
    command = cli.get_command(None, name)
    options, env_defaults, job_param, _ = fast.COMMANDS[name]
    spellings = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for spelling in param.opts + param.secondary_opts:
                spellings[spelling] = param.name
            if param.envvar:
                assert param.name == "site" or env_defaults.get(param.name) == param.envvar
    helps = set(command.get_help_option_names(click.Context(command)))
    assert {s: p for s, p in spellings.items() if s not in helps} == {s: p for s, (p, _) in options.items()}
    assert job_param in {p.name for p in command.params if isinstance(p, click.Argument)}


def _run(capsys, argv, fast_path):
    original = fast.serve
    if not fast_path:
        fast.serve = lambda args: None
    try:
        code = main(argv)
    finally:
        fast.serve = original
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [
    ["status", "--site", IB, "x:y"],                 # a bad job id: Error line, exit 2
    ["status", "--site", "nosuchsite", "1"],         # an unknown site: exit 2
    ["logs", "--site", IB, "hopper:12ab"],
    ["why", "--site", IB, "--here", "nope:1"],
    ["status", "--site", IB, "hopper:1"],            # the cluster's Slurm is not here: exit 1
    ["logs", "--site", IB, "-n", "2", "hopper:1"],
    ["why", "--site", IB, "--here", "hopper:1"],
    ["eff", "--site", IB, "hopper:x"],
    ["eff", "--site", IB, "hopper:1"],
    ["status"],                                      # no site: the sites there are
])
def test_the_fast_path_prints_and_exits_as_click_does(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SLURMKIT_VIA", "local")
    monkeypatch.delenv("SLURMKIT_SITE", raising=False)
    monkeypatch.delenv("SLURMKIT_DEBUG", raising=False)
    site = tmp_path / "site.yaml"
    site.write_text(Path(IB).read_text().replace(
        "slurm_conf: /etc/slurm/slurm.conf", "slurm_conf: %s" % (tmp_path / "missing" / "slurm.conf")))
    argv = [str(site) if a == IB else a for a in argv]
    assert fast.parse(argv) is not None
    served = _run(capsys, argv, fast_path=True)
    assert served == _run(capsys, argv, fast_path=False)
    code, out, err = served
    assert code in (1, 2) and out == "" and err.startswith("Error: ") and err.count("\n") == 1, served


HELPS = [["--help"], ["-h"], ["status", "--help"], ["logs", "-h"], ["why", "--help"], ["eff", "--help"]]


@pytest.mark.parametrize("argv", HELPS)
@pytest.mark.parametrize("columns", ["60", "200"])
def test_help_is_clicks_own_text_rendered_once_and_then_kept(argv, columns, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", columns)
    reference = _run(capsys, argv, fast_path=False)
    assert reference[0] == 0 and reference[1].startswith("Usage: slurmkit")
    assert _run(capsys, argv, fast_path=True) == reference          # rendered by click, then kept
    assert list((tmp_path / "help").iterdir())
    assert _run(capsys, argv, fast_path=True) == reference          # the kept copy


def test_a_kept_help_from_other_code_is_not_used(capsys, monkeypatch, tmp_path):
    """The kept text names the source files it came from; a text kept for other files is rendered again."""
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "80")
    _run(capsys, ["--help"], fast_path=True)
    (kept,) = (tmp_path / "help").iterdir()
    signature = kept.read_text().partition("\n")[0]
    assert os.path.abspath(fast.__file__) in signature
    kept.write_text(signature.replace("fast.py:", "fast.py:1") + "\nstale help\n")
    code, out, _ = _run(capsys, ["--help"], fast_path=True)
    assert code == 0 and out.startswith("Usage: slurmkit") and "stale" not in out
    assert kept.read_text().partition("\n")[0] == signature
