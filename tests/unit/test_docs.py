"""The documentation: the README as the front door, the MkDocs site in docs/, the command reference.

- every top-level command has a reference page under docs/reference/ made by
  mkdocs-click from that very command object, and the page is in the nav;
- every example command line (fenced code in README.md, docs/ and the READMEs
  the docs include, and the ``Example:`` paragraphs of every command's own
  help) names subcommands and options that exist, where they are given;
- the README stays short and its links lead to files that exist;
- ``mkdocs build --strict`` succeeds (broken links and anchors are errors:
  mkdocs.yml's ``validation``); skipped where mkdocs is not installed.
"""

import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import click
import pytest
import yaml

from slurmkit.cli.commands import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
REFERENCE = DOCS / "reference"
README_MAX_LINES = 200

ROOT_CTX = click.Context(cli, info_name="slurmkit", **cli.context_settings)
# Hidden commands are old names kept as aliases (`slurmkit jobs`): documented under their new name only.
TOP_LEVEL = [name for name in cli.list_commands(ROOT_CTX) if not cli.get_command(ROOT_CTX, name).hidden]


# ----------------------------------------------------------------------------- mkdocs.yml and the pages

class _ConfigLoader(yaml.SafeLoader):
    """mkdocs.yml as plain data: mkdocs' own tags (``!relative``, ``!ENV``) read as their text."""


_ConfigLoader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                                    if isinstance(node, yaml.ScalarNode) else None)


def mkdocs_config():
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_ConfigLoader)


def nav_pages(nav=None):
    """Every page file the nav names, relative to docs/."""
    nav = mkdocs_config()["nav"] if nav is None else nav
    if isinstance(nav, str):
        return [nav]
    pages = []
    for entry in nav:
        if isinstance(entry, dict):
            for value in entry.values():
                pages.extend(nav_pages(value))
        else:
            pages.extend(nav_pages(entry))
    return pages


def click_directives(text):
    """The options of each ``::: mkdocs-click`` block of a page: [{"module": ..., "command": ...}]."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.strip() == "::: mkdocs-click":
            current = {}
            blocks.append(current)
            continue
        match = re.match(r"^\s+:(\w+):\s*(.*?)\s*$", line)
        if current is not None and match:
            current[match.group(1)] = match.group(2)
        else:
            current = None
    return blocks


def load_docs_hooks():
    spec = importlib.util.spec_from_file_location("slurmkit_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_nav_names_pages_that_exist():
    pages = nav_pages()
    assert "index.md" in pages and "reference/index.md" in pages
    assert [p for p in pages if not (DOCS / p).is_file()] == []
    assert len(pages) == len(set(pages)), "a page is in the nav twice"


def test_every_top_level_command_is_known():
    # The parametrized test below covers whatever the group lists; make sure it lists the commands.
    assert {"submit", "render", "status", "wait", "cancel", "site", "health", "daemon", "sweep"} <= \
        set(TOP_LEVEL)


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_every_top_level_command_has_a_generated_reference_page_in_the_nav(name):
    page = REFERENCE / ("%s.md" % name)
    assert page.is_file(), "no reference page %s for `slurmkit %s`" % (page.relative_to(ROOT), name)
    blocks = click_directives(page.read_text(encoding="utf-8"))
    assert len(blocks) == 1, "%s: expected one ::: mkdocs-click block, found %d" % (page.name, len(blocks))
    (options,) = blocks
    command = getattr(importlib.import_module(options["module"]), options["command"])
    assert command is cli.get_command(ROOT_CTX, name), \
        "%s documents %s:%s, which is not the command `slurmkit %s` runs" % (
            page.name, options["module"], options["command"], name)
    assert options.get("prog_name") == "slurmkit " + name
    assert "reference/%s.md" % name in nav_pages(), "reference/%s.md is not in mkdocs.yml's nav" % name
    assert "(%s.md)" % name in (REFERENCE / "index.md").read_text(encoding="utf-8"), \
        "reference/index.md does not link %s.md" % name


def test_the_reference_has_no_page_for_a_command_that_does_not_exist():
    pages = {p.stem for p in REFERENCE.glob("*.md")} - {"index"}
    assert pages == set(TOP_LEVEL)
    assert {"reference/%s.md" % p for p in pages} <= set(nav_pages())


def test_the_reference_root_page_documents_the_root_group_alone():
    (options,) = click_directives((REFERENCE / "index.md").read_text(encoding="utf-8"))
    assert (options["module"], options["command"], options.get("prog_name")) == ("slurmkit_docs", "cli", "slurmkit")
    root = load_docs_hooks().root_group_alone()
    assert root.list_commands(click.Context(root)) == []
    assert [p.opts for p in root.params] == [p.opts for p in cli.params]
    assert root.help == cli.help


def test_the_hook_turns_help_examples_into_code_blocks():
    lines = list(load_docs_hooks().description_lines(
        "Do a thing.\n\n\b\nExamples:\n  slurmkit a\n  */2 * * * * slurmkit b\n\nMore text."))
    assert lines == ["Do a thing.", "", "*Examples:*", "", "```text", "slurmkit a", "*/2 * * * * slurmkit b",
                     "```", "", "More text.", ""]


# ----------------------------------------------------------------------------- example command lines

_PUNCTUATION = set("();<>|&")
_CRON_FIELD = re.compile(r"^[0-9*/,-]+$")
_PYTHON = re.compile(r"^(\S*/)?python3?(\.\d+)?$")
_SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console", "cron", "text"}


def strip_comment(line):
    """``line`` without a shell comment: a ``#`` that starts a word, outside quotes."""
    quote, previous = None, " "
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and previous.isspace():
            return line[:i]
        previous = char
    return line


def shell_words(line):
    lexer = shlex.shlex(strip_comment(line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words = []
    for word in lexer:
        if set(word) <= _PUNCTUATION:       # |, &&, ;, >, >> ...: the command ends there
            break
        words.append(word)
    return words


def slurmkit_arguments(line):
    """The arguments after the ``slurmkit`` program on this command line, or None if it runs none.

    Accepted forms: ``slurmkit ...``, ``$ slurmkit ...``, ``/path/to/slurmkit ...``,
    ``python -m slurmkit ...``, each after ``exec`` or a crontab schedule (and user).
    """
    try:
        words = shell_words(line)
    except ValueError:           # an unbalanced quote: not a command line
        return None
    if words[:1] == ["$"]:
        words = words[1:]
    if len(words) > 5 and all(_CRON_FIELD.match(w) for w in words[:5]):
        words = words[5:]
        if len(words) > 1 and not _is_program(words, 0) and _is_program(words, 1):
            words = words[1:]            # the user column of /etc/crontab
    if words[:1] == ["exec"]:
        words = words[1:]
    if not words:
        return None
    if words[0] == "slurmkit" or words[0].endswith("/slurmkit"):
        return words[1:]
    if _PYTHON.match(words[0]) and words[1:3] == ["-m", "slurmkit"]:
        return words[3:]
    return None


def _is_program(words, i):
    return words[i] == "slurmkit" or words[i].endswith("/slurmkit") or bool(_PYTHON.match(words[i]))


def _options_of(command, ctx):
    found = {}
    for param in command.get_params(ctx):     # the help option included
        if isinstance(param, click.Option):
            for opt in param.opts + param.secondary_opts:
                found[opt] = param
    return found


def _takes_value(option):
    return not (option.is_flag or option.count) and option.nargs != 0


def problems_of(arguments):
    """What is wrong with ``slurmkit ARGUMENTS``: unknown subcommands and options, as click would
    refuse them.  Options are checked up to ``--`` and, for commands whose options end at the
    first word of the job's command (render, submit), up to that word; placeholders (``...``,
    ``[X]``, ``<X>``) are skipped."""
    command, ctx, path = cli, ROOT_CTX, ["slurmkit"]
    problems, i = [], 0
    while i < len(arguments):
        word = arguments[i]
        i += 1
        if word == "--":
            break
        if word == "..." or word[:1] in "[<":
            continue
        if word.startswith("-") and word != "-":
            options = _options_of(command, ctx)
            name, has_value = (word.split("=", 1)[0], "=" in word) if word.startswith("--") else (word[:2], len(word) > 2)
            option = options.get(name)
            if option is None:
                problems.append("`%s` has no option %s" % (" ".join(path), name))
                continue
            if _takes_value(option) and not has_value:
                i += option.nargs if option.nargs > 0 else 1
            continue
        if isinstance(command, click.Group):
            sub = command.get_command(ctx, word)
            if sub is None:
                problems.append("`%s` has no subcommand %r" % (" ".join(path), word))
                break
            path.append(word)
            ctx = click.Context(sub, parent=ctx, info_name=word, **sub.context_settings)
            command = sub
            continue
        if not ctx.allow_interspersed_args:
            break        # the job's command: its options are its own
    return problems


def fenced_command_lines(path):
    """(line number, logical line) of each line in the file's fenced shell-like code blocks;
    continuation lines (ending in a backslash) are joined."""
    fence, language, pending, start = None, "", "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if fence is None:
            match = re.match(r"^(```+|~~~+)\s*([\w+-]*)", stripped)
            if match:
                fence, language = match.group(1), match.group(2).lower()
            continue
        if stripped.startswith(fence):
            fence, pending = None, ""
            continue
        if language not in _SHELL_LANGUAGES:
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        yield start, pending + stripped
        pending = ""


def included_files():
    """The repository files the docs include (pymdownx.snippets: ``--8<-- "path"``)."""
    found = set()
    for page in DOCS.rglob("*.md"):
        for match in re.finditer(r'^--8<--\s+"([^":]+)', page.read_text(encoding="utf-8"), re.M):
            found.add(ROOT / match.group(1))
    return sorted(found)


def documents():
    return [README] + sorted(DOCS.rglob("*.md")) + included_files()


def _walk(command, ctx, path):
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub.hidden:
                continue     # an old name: its help is the new command's, read under that name
            yield from _walk(sub, click.Context(sub, parent=ctx, info_name=name, **sub.context_settings), path + [name])


def help_example_lines():
    """(command path, line) of each line of the ``\\b`` Example(s) paragraph of every command's help."""
    for path, command in _walk(cli, ROOT_CTX, ["slurmkit"]):
        in_example = False
        for line in (command.help or "").splitlines():
            if line.strip().startswith("Example"):
                in_example = True
                continue
            if not line.strip():
                in_example = False
                continue
            if in_example:
                yield " ".join(path), line.strip()


def _join_help_lines(lines):
    joined, pending = [], ""
    for where, line in lines:
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append((where, pending + line))
        pending = ""
    return joined


def test_the_checker_refuses_what_click_would_refuse():
    assert problems_of(shell_words("submit -N 2 --comm heavy -- python train.py --nodez 3")) == []
    assert problems_of(shell_words("submit -N 2 python3 train.py -c 2 --debug")) == []   # train.py's options
    assert problems_of(shell_words("--site x --debug clusters --json beta")) == []
    assert problems_of(shell_words("sweep status train-1 --failed --output f.jsonl")) == []
    assert problems_of(shell_words("daemon jobs --all --json")) == []
    assert problems_of(shell_words("daemon jobs stop 3 --cancel")) == []
    assert problems_of(shell_words("submit --nodez 2 -- x")) == ["`slurmkit submit` has no option --nodez"]
    assert problems_of(shell_words("sweep statuz x")) == ["`slurmkit sweep` has no subcommand 'statuz'"]
    assert problems_of(shell_words("status --debug")) == ["`slurmkit status` has no option --debug"]
    assert problems_of(shell_words("health sweep -Z")) == ["`slurmkit health sweep` has no option -Z"]
    assert slurmkit_arguments("*/10 * * * * root /opt/slurmkit/bin/slurmkit health sweep --drain > x") == \
        ["health", "sweep", "--drain"]
    assert slurmkit_arguments(".venv/bin/python -m slurmkit --site s clusters") == ["--site", "s", "clusters"]
    assert slurmkit_arguments("$ slurmkit wait alpha:1  # a comment, isn't it") == ["wait", "alpha:1"]
    assert slurmkit_arguments("make test") is None and slurmkit_arguments("cat slurmkit") is None


def test_every_example_command_line_in_the_docs_names_real_commands_and_options():
    problems, checked = [], 0
    for path in documents():
        for number, line in fenced_command_lines(path):
            arguments = slurmkit_arguments(line)
            if arguments is None:
                continue
            checked += 1
            problems.extend("%s:%d: %s" % (path.relative_to(ROOT), number, p) for p in problems_of(arguments))
    assert problems == []
    assert checked >= 50, "only %d example command lines found: is the extraction broken?" % checked


def test_every_example_in_the_commands_own_help_names_real_commands_and_options():
    problems, checked = [], set()
    for where, line in _join_help_lines(help_example_lines()):
        arguments = slurmkit_arguments(line)
        if arguments is None:
            continue
        checked.add(where)
        problems.extend("help of `%s`: %s: %s" % (where, line, p) for p in problems_of(arguments))
    assert problems == []
    # test_cli.py makes every command show an example; each of them is read here.
    assert checked == {" ".join(path) for path, _ in _walk(cli, ROOT_CTX, ["slurmkit"])}


# ----------------------------------------------------------------------------- the README

def _slug(text):
    """Python-Markdown's toc slug (what mkdocs uses) of a heading's text."""
    text = re.sub(r"[`*_]", "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path):
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*$", path.read_text(encoding="utf-8"), re.M)}


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, "README.md has %d lines; the rest belongs in docs/" % len(lines)
    text = "\n".join(lines)
    # CI and other tools read the test command here.
    assert "make test" in text and "`make test` is the project's test command" in text
    for target in ("make demo", "make unit", "make pyslurm", "make bench", "make test-releases", "make docs",
                   "make cluster-up", "make cluster-down", "make cluster-status", "make -s cluster-env"):
        assert target in text, target


def test_the_readme_links_to_docs_pages_that_exist():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"^[a-z]+:", link)]
    broken = []
    for link in local:
        target, _, anchor = link.partition("#")
        path = ROOT / target if target else README
        if not path.is_file():
            broken.append(link)
        elif anchor and anchor not in _anchors(path):
            broken.append(link)
    assert broken == []
    docs_links = {link.partition("#")[0] for link in local if link.startswith("docs/")}
    assert {"docs/index.md", "docs/researcher/index.md", "docs/admin/index.md", "docs/architecture.md",
            "docs/benchmarks.md", "docs/reference/index.md"} <= docs_links
    # Every page the README links is one the site shows.
    assert {link[len("docs/"):] for link in docs_links} <= set(nav_pages())


# ----------------------------------------------------------------------------- the build

def _docs_tools_missing():
    return [name for name in ("mkdocs", "material", "mkdocs_click", "pymdownx")
            if importlib.util.find_spec(name) is None]


def test_the_docs_build_strict(tmp_path):
    missing = _docs_tools_missing()
    if missing:
        pytest.skip("%s not installed (the docs extra, `pip install -e '.[docs]'`): the docs are built by the "
                    "host suite and `make docs`, not in venvs without it (such as the Debian roots')"
                    % ", ".join(missing))
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
                            cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    # The generated reference and the included READMEs are really there.
    submit = (site / "reference" / "submit" / "index.html").read_text(encoding="utf-8")
    assert "slurmkit submit" in submit and "--auto-requeue" in submit and "::: mkdocs-click" not in submit
    sweep = (site / "reference" / "sweep" / "index.html").read_text(encoding="utf-8")
    assert 'id="slurmkit-sweep-rerun"' in sweep
    reference = (site / "admin" / "site-config-reference" / "index.html").read_text(encoding="utf-8")
    assert "health.drain_cap" in reference and "--8&lt;--" not in reference and "--8<--" not in reference
