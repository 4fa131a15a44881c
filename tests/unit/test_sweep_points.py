"""Sweep points: grids, points files, stable ids, placeholders (slurmkit.sweep.points, pure)."""

import json
import shlex
import subprocess

import pytest

from slurmkit.errors import UsageError
from slurmkit.sweep import points as pts


def test_grid_values_and_inclusive_ranges():
    grid = pts.parse_grid(["lr=1e-3,3e-4,1e-4", "seed=0..4", "shift=-2..1,7"])
    assert grid == [("lr", ["1e-3", "3e-4", "1e-4"]), ("seed", ["0", "1", "2", "3", "4"]),
                    ("shift", ["-2", "-1", "0", "1", "7"])]


@pytest.mark.parametrize("spec,message", [
    ("lr", "write NAME=V1,V2"),
    ("lr=1,,2", "empty value"),
    ("lr=", "empty value"),
    ("seed=4..0", "counts down; write it as 0..4"),
    ("lr=1,2,1", "1 given more than once"),
    ("2lr=1", "is not a parameter name"),
    ("point=1", "SLURMKIT_SWEEP_POINT, which slurmkit sets"),
    ("seed=0..100000", "at most 100000 points"),
])
def test_bad_grids_are_refused_with_the_option(spec, message):
    with pytest.raises(UsageError) as err:
        pts.parse_grid([spec])
    assert message in str(err.value) and "--sweep" in str(err.value)


def test_names_that_collide_as_variables_are_refused():
    with pytest.raises(UsageError, match="'lr' and 'LR'|'LR' and 'lr'|both exported as SLURMKIT_SWEEP_LR"):
        pts.parse_grid(["lr=1", "LR=2"])
    with pytest.raises(UsageError, match="given twice"):
        pts.parse_grid(["lr=1", "lr=2"])


def test_the_grid_is_every_combination_last_varying_fastest():
    names, points, warnings = pts.build_points(pts.parse_grid(["lr=a,b", "seed=0..2"]))
    assert names == ["lr", "seed"] and warnings == []
    assert [p.mapping for p in points][:4] == [{"lr": "a", "seed": "0"}, {"lr": "a", "seed": "1"},
                                               {"lr": "a", "seed": "2"}, {"lr": "b", "seed": "0"}]
    assert len(points) == 6 and len({p.id for p in points}) == 6


def test_a_point_id_depends_on_its_values_only():
    _, first, _ = pts.build_points(pts.parse_grid(["lr=a,b", "seed=0..2"]))
    _, second, _ = pts.build_points(pts.parse_grid(["seed=2..3", "lr=b"]))
    by_values = {json.dumps(sorted(p.values)): p.id for p in first}
    shared = [p for p in second if json.dumps(sorted(p.values)) in by_values]
    assert len(shared) == 1 and shared[0].id == by_values[json.dumps(sorted(shared[0].values))]
    assert len(shared[0].id) == 12 and int(shared[0].id, 16) >= 0


def test_too_many_points_in_the_product_is_refused():
    with pytest.raises(UsageError, match="1000000 points; at most 100000"):
        pts.build_points(pts.parse_grid(["a=0..999", "b=0..999"]))


def test_jsonl_points_file_values_are_text(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"lr": 0.001, "name": "a b", "flag": true}\n\n{"lr": 1e-4, "name": "$(x)", "flag": false}\n')
    names, rows = pts.read_points_file(str(path))
    assert names == ["lr", "name", "flag"]
    assert rows == [[("lr", "0.001"), ("name", "a b"), ("flag", "true")],
                    [("lr", "0.0001"), ("name", "$(x)"), ("flag", "false")]]


def test_csv_points_file_crossed_with_the_grid(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('model,opt\nsmall,"adam, warm"\nlarge,sgd\n')
    names, points, _ = pts.build_points(pts.parse_grid(["seed=0..1"]), pts.read_points_file(str(path)))
    assert names == ["model", "opt", "seed"]
    assert [p.mapping for p in points] == [
        {"model": "small", "opt": "adam, warm", "seed": "0"}, {"model": "small", "opt": "adam, warm", "seed": "1"},
        {"model": "large", "opt": "sgd", "seed": "0"}, {"model": "large", "opt": "sgd", "seed": "1"}]


@pytest.mark.parametrize("name,text,message", [
    ("p.jsonl", '{"a": 1}\n{"b": 2}\n', "p.jsonl:2: every row names the same parameters"),
    ("p.jsonl", '{"a": 1}\n[1]\n', "p.jsonl:2: each line is one JSON object"),
    ("p.jsonl", '{"a": 1}\n{"a": \n', "p.jsonl:2: not JSON"),
    ("p.jsonl", '{"a": {"b": 1}}\n', "values are strings, numbers or booleans"),
    ("p.csv", "a,b\n1\n", "p.csv:2: 1 values for the 2 columns"),
    ("p.csv", "a,a\n1,2\n", "given twice"),
    ("p.txt", "a\n", "name a .jsonl file"),
    ("p.jsonl", "\n", "has no points"),
])
def test_bad_points_files_are_refused_naming_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        pts.read_points_file(str(path))
    assert message in str(err.value)


def test_a_repeated_file_row_runs_once_with_a_warning(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": 1}\n')
    _, points, warnings = pts.build_points((), pts.read_points_file(str(path)))
    assert [p.mapping["a"] for p in points] == ["1", "2"]
    assert warnings == ["--sweep-file: row 3 repeats row 1; the point runs once"]


def test_a_file_and_a_grid_naming_one_parameter_are_refused(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"lr": 1}\n')
    with pytest.raises(UsageError, match="lr is both in --sweep-file and given with --sweep"):
        pts.build_points(pts.parse_grid(["lr=2"]), pts.read_points_file(str(path)))


def test_placeholders_are_names_in_braces_only():
    assert pts.placeholders("--lr={lr}/{seed}") == ["lr", "seed"]
    assert pts.placeholders("${HOME}/{{lr}}/{1..3}/{\"a\": 1}/{a,b}") == []


def test_unknown_placeholders_and_a_placeholder_program_are_refused():
    with pytest.raises(UsageError) as err:
        pts.check_command(["python", "train.py", "--lr", "{lrr}"], ["lr"])
    assert "{lrr}" in str(err.value) and "has: lr" in str(err.value) and "{{lrr}}" in str(err.value)
    with pytest.raises(UsageError, match="first word"):
        pts.check_command(["{prog}", "x"], ["prog"])
    assert pts.check_command(["python", "t.py", "--lr={lr}", "x", "{seed}{lr}"], ["lr", "seed"]) == \
        {2: ["lr"], 4: ["seed", "lr"]}


HOSTILE = ["it's", '"dq"', "$(touch {marker})", "`touch {marker}`", "a b  c", "*", "line1\nline2", "-x", ""]


def test_substituted_words_reach_a_program_literally_and_shell_code_gets_quoted(tmp_path):
    marker = tmp_path / "pwned"
    for raw in HOSTILE:
        value = raw.format(marker=marker)
        point = pts.make_point([("v", value)])
        # An argument word: the value inside it, as one argument.
        assert pts.substitute("--v={v}", point.mapping) == "--v=" + value
        # Shell code: the value shell-quoted, so the shell reads it as one literal word.
        command = ["bash", "-c", 'printf "%s" {v}', "name"]
        words = pts.point_words(command, {2: ["v"]}, point)
        out = subprocess.run(["bash", "-c", words[0]], capture_output=True, text=True, check=True).stdout
        assert out == value
    assert not marker.exists()


def test_shell_code_is_the_argument_of_dash_c_of_a_shell_only():
    assert pts.is_shell_code(["bash", "-c", "x"], 2)
    assert pts.is_shell_code(["/bin/sh", "-ec", "x"], 2)
    assert pts.is_shell_code(["bash", "-l", "-c", "x"], 3)
    assert not pts.is_shell_code(["python3", "-c", "x"], 2)       # Python code: the value goes in as is
    assert not pts.is_shell_code(["bash", "script.sh", "x"], 2)
    assert not pts.is_shell_code(["bash", "-c", "x", "arg"], 3)   # $0/$1 of the code: plain arguments


def test_escaped_braces_are_literal_and_other_words_untouched():
    values = {"lr": "0.1"}
    assert pts.substitute("{{lr}}={lr}", values) == "{lr}=0.1"
    assert pts.substitute("${lr}", values) == "${lr}"
    assert pts.literal_command(["echo", "{{lr}}", "{lr}"]) == ("echo", "{lr}", "{lr}")
    assert shlex.quote(pts.substitute("x{lr}", values, shell_code=True)) == "x0.1"


def test_env_names_are_upper_case_with_the_prefix():
    assert pts.env_name("lr") == "SLURMKIT_SWEEP_LR"
    assert pts.env_name("warm_up2") == "SLURMKIT_SWEEP_WARM_UP2"
