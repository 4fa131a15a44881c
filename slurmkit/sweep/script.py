"""One array's job script: the job slurmkit renders anyway, plus its points table and a prologue (pure).

The job is rendered as usual (template, fabric, topology, ``--comment``
token) with each command word that holds a placeholder replaced by a
sentinel; here the sentinels become ``"${slurmkit_sweep_words[K]}"``, and
the script is rearranged around it:

- ``#SBATCH --array=...`` (and ``--dependency``/``--hold`` when asked) after
  the last directive, so sbatch reads them with the others;
- right after the directives, before the site's setup can fail, a prologue
  that reads the task's row by ``SLURM_ARRAY_TASK_ID`` from the points table
  and exports the point's values;
- the rest of the rendered job becomes the function ``slurmkit_sweep_task``,
  which the script runs as a subshell it supervises: the task's output goes
  to the point's own files, how it ended to ``exit.status``, and for a canary
  array the throttle is widened or the array held;
- the points table, one line per index, after the script's last command
  (or in one file next to it when the table is too large for a script): a
  task reads its own line with ``mapfile`` instead of bash parsing every row,
  which at 1,000 points cost each task more than the rest of its script.

Every value is shell-quoted (``shlex.quote``, or ``$'...'`` on one line) where
it is written; bash never evaluates a value, it only assigns it.
"""

import hashlib
import re
import shlex
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import ConfigError, UsageError
from slurmkit.script.quoting import shell_quote_line
from slurmkit.script.templates import script_part
from slurmkit.site.model import Site
from slurmkit.slurm.commands import SCRIPT_TRAILER
from slurmkit.sweep.points import Point, env_name

# A table larger than this goes into a file next to the script: Slurm keeps every
# array's script in slurmctld's memory and refuses one above max_script_size (4 MB).
INLINE_TABLE_LIMIT = 1 << 20
_BASH_RE = re.compile(r"#!\s*(?:/usr)?/bin/(?:env\s+)?bash(?:\s|$)")


class Row(NamedTuple):
    index: int
    point: Point
    words: Tuple[str, ...]      # the command's placeholder words, as this point runs them


class Canary(NamedTuple):
    """A canary array: started at throttle 1 (see the module docstring of slurmkit.sweep.submission)."""

    failures: int               # K: hold the rest after K failures with one exit status and no success
    widen_to: int               # the throttle after the first success (0: none)
    key: str                    # the directory of its markers, under <sweep dir>/canary/


def tag_of(command: Sequence[str]) -> str:
    """8 hex digits naming the command: sentinels stay the same between renders (the render cache)."""
    return hashlib.sha256("\0".join(command).encode("utf-8", "surrogatepass")).hexdigest()[:8]


def sentinel_command(command: Sequence[str], used: Sequence[int]) -> Tuple[Tuple[str, ...], List[str]]:
    """The command with each placeholder word (by index) replaced by a sentinel; (command, sentinels)."""
    tag = tag_of(command)
    words = list(command)
    marks = []
    for k, i in enumerate(sorted(used)):
        mark = "SLURMKIT_SWEEP_WORD_%d_%s" % (k, tag)
        words[i] = mark
        marks.append(mark)
    return tuple(words), marks


def points_table(rows: Sequence[Row], names: Sequence[str]) -> str:
    """The points table: line K (from 0) is ``K ASSIGNMENTS`` for the row of index K, empty where none is.

    ASSIGNMENTS set the point id and its words and export its values; every
    value is quoted on one line (:func:`shell_quote_line`), so a task reads
    its row with one ``mapfile`` instead of bash parsing the whole table.
    """
    by_index = {row.index: row for row in rows}
    lines = [""] * (max(by_index) + 1 if by_index else 0)
    for index, row in by_index.items():
        values = row.point.mapping
        exports = " ".join("%s=%s" % (env_name(n), shell_quote_line(values[n])) for n in names if n in values)
        words = " ".join(shell_quote_line(w) for w in row.words)
        lines[index] = "%d slurmkit_sweep_point=%s;%s slurmkit_sweep_words=(%s)" % (
            index, row.point.id, " export %s;" % exports if exports else "", words)
    return "\n".join(lines) + "\n"


_ROW_RE = re.compile(r"(?m)^(\d+) slurmkit_sweep_point=(\w+);(.*)$")


def table_rows(text: str) -> Dict[int, Tuple[str, str]]:
    """{index: (point id, the rest of its row)} from a points table (:func:`points_table`), alone or
    inside an array's script: what a task reads of its own row, for tests and tools that inspect a
    sweep."""
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in _ROW_RE.finditer(text)}


def table_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _prologue(sweep_id: str, sweep_dir: str, table_file: Optional[Tuple[str, str]], skip: int) -> str:
    """The lines between the directives and the task: find the task's row in the table and export it."""
    q = shlex.quote
    out = ["# slurmkit sweep %s: each task runs the point of its SLURM_ARRAY_TASK_ID in the points table, with"
           % sweep_id,
           "# the values exported as SLURMKIT_SWEEP_<NAME> and its output in its own directory.",
           "# (--array is set above; this table is the array's, so a rerun keeps every point's index.)"]
    if table_file is None:
        out += ["# The table is the end of this script, after its last command (exit): row K on line K of it.",
                "slurmkit_sweep_table=$0 slurmkit_sweep_skip=%d" % skip]
    else:
        path, digest = table_file
        out += ["# The table is too large for a job script: it is the file below, checked before it is read.",
                "slurmkit_sweep_table=%s slurmkit_sweep_skip=0" % q(path),
                "if ! printf '%%s  %%s\\n' %s \"$slurmkit_sweep_table\" | sha256sum --check --status 2>/dev/null; then"
                % digest,
                "    echo \"slurmkit: error: the points table $slurmkit_sweep_table is missing or changed\" >&2",
                "    exit 1",
                "fi"]
    out += [
        "slurmkit_sweep_row() {",
        "    local row=()",
        "    [[ $1 =~ ^[0-9]+$ ]] || return 1",
        '    mapfile -t -s "$((slurmkit_sweep_skip + 10#$1))" -n 1 row <"$slurmkit_sweep_table" || return 1',
        '    [[ ${row[0]:-} == "$1 "* ]] || return 1',
        '    eval "${row[0]#"$1 "}"',
        "}",
        'if ! slurmkit_sweep_row "${SLURM_ARRAY_TASK_ID:-}"; then',
        '    echo "slurmkit: error: task ${SLURM_ARRAY_TASK_ID:-(not an array task)} has no row in the points '
        'table of sweep %s" >&2' % sweep_id,
        "    exit 1",
        "fi",
        "SLURMKIT_SWEEP_DIR=%s" % q(sweep_dir),
        '[[ $SLURMKIT_SWEEP_DIR == /* ]] || SLURMKIT_SWEEP_DIR=$PWD/$SLURMKIT_SWEEP_DIR',
        "export SLURMKIT_SWEEP_ID=%s SLURMKIT_SWEEP_DIR SLURMKIT_SWEEP_POINT=$slurmkit_sweep_point" % q(sweep_id),
        "export SLURMKIT_SWEEP_POINT_DIR=$SLURMKIT_SWEEP_DIR/points/$slurmkit_sweep_point",
        "export SLURMKIT_CHECKPOINT_DIR=$SLURMKIT_SWEEP_POINT_DIR/checkpoint",
    ]
    return "\n".join(out) + "\n"


def _supervisor(sweep_id: str, canary: Optional[Canary], site: Optional[Site]) -> str:
    """After the task's function: run it as a child that this shell watches and ends as it did."""
    out = [
        script_part("_supervise.sh.j2", site).rstrip("\n"),
        'if ! mkdir -p -- "$SLURMKIT_CHECKPOINT_DIR"; then',
        '    echo "slurmkit: error: cannot create $SLURMKIT_CHECKPOINT_DIR" >&2',
        "    exit 1",
        "fi",
        "# Every attempt of the point appends to its own two files, after a line that names the attempt.",
        'exec >>"$SLURMKIT_SWEEP_POINT_DIR/output.log" 2>>"$SLURMKIT_SWEEP_POINT_DIR/error.log"',
        "TZ=UTC0 printf -v slurmkit_sweep_now '%(%Y-%m-%dT%H:%M:%SZ)T' -1",
        'slurmkit_sweep_attempt="== slurmkit sweep $SLURMKIT_SWEEP_ID point $SLURMKIT_SWEEP_POINT: task '
        '${SLURM_ARRAY_JOB_ID:-}_${SLURM_ARRAY_TASK_ID} (job ${SLURM_JOB_ID:-}, restart ${SLURM_RESTART_COUNT:-0}) '
        'on ${SLURMD_NODENAME:-$HOSTNAME} at $slurmkit_sweep_now =="',
        'printf \'%s\\n\' "$slurmkit_sweep_attempt"',
        'printf \'%s\\n\' "$slurmkit_sweep_attempt" >&2',
    ]
    if canary is not None:
        out += _canary_lines(sweep_id, canary)
    out += [
        "# The task runs in a child of this shell (a subshell: no second bash to start and parse the",
        "# script), which passes scancel's TERM, INT and the time limit's USR1 on to it, records how it",
        "# ended in the point's directory (exit.status: Slurm forgets ended tasks after MinJobAge, and",
        "# not every cluster keeps accounting) and then ends the same way itself: the same exit",
        "# status, or the same signal.",
        'slurmkit_supervise "TERM INT USR1" "" slurmkit_sweep_task "$@"',
        "slurmkit_sweep_rc=$slurmkit_rc",
        'printf \'%s %s_%s %s\\n\' "$slurmkit_sweep_rc" "${SLURM_ARRAY_JOB_ID:-}" "$SLURM_ARRAY_TASK_ID" '
        '"${SLURM_RESTART_COUNT:-0}" >"$SLURMKIT_SWEEP_POINT_DIR/exit.status.$$" &&',
        '    mv -f -- "$SLURMKIT_SWEEP_POINT_DIR/exit.status.$$" "$SLURMKIT_SWEEP_POINT_DIR/exit.status" || true',
        "# Slurm's own output file of the task only holds what failed before the lines above: drop it empty.",
        'slurmkit_sweep_slurm_out=$SLURMKIT_SWEEP_DIR/slurm/${SLURM_ARRAY_JOB_ID:-}_$SLURM_ARRAY_TASK_ID.out',
        '[[ -s $slurmkit_sweep_slurm_out ]] || rm -f -- "$slurmkit_sweep_slurm_out"',
    ]
    if canary is not None:
        out.append('slurmkit_sweep_canary "$slurmkit_sweep_rc"')
    out += [
        'slurmkit_end_as "$slurmkit_sweep_rc"',
        "# The last command above: what follows is the points table, which bash never reads as commands.",
    ]
    return "\n".join(out) + "\n"


def _canary_lines(sweep_id: str, canary: Canary) -> List[str]:
    k = int(canary.failures)
    first = "the first task" if k == 1 else "the first %d tasks" % k
    stopped = ("%s failed with exit status $rc and none passed; the rest are held: fix the cause, then "
               "'slurmkit sweep rerun %s'" % (first, sweep_id))
    return [
        "# Canary: the array started one task at a time.  After each task this shell widens the throttle on",
        "# the first success (and releases this submission's other arrays on this cluster), or holds the",
        "# rest once the first %d failures share one exit status." % k,
        "slurmkit_sweep_canary() {",
        "    local dir=$SLURMKIT_SWEEP_DIR/canary/%s rc=$1 first" % shlex.quote(canary.key),
        '    mkdir -p -- "$dir" || return 0',
        '    [[ -e $dir/passed || -e $dir/stopped ]] && return 0',
        "    if (( rc == 0 )); then",
        '        : >"$dir/passed"',
        '        echo "slurmkit: canary task ${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID passed: the array now '
        'runs %s" >&2' % ("up to %d tasks at a time" % canary.widen_to if canary.widen_to else "without a limit"),
        "        # scontrol's own answer lists every task (finished ones as errors): not worth the log.",
        '        scontrol update JobId="$SLURM_ARRAY_JOB_ID" ArrayTaskThrottle=%d >/dev/null 2>&1 || true'
        % canary.widen_to,
        '        if [[ -s $dir/held ]]; then scontrol release "$(<"$dir/held")" >/dev/null 2>&1 || true; fi',
        "        return 0",
        "    fi",
        '    echo "$rc" >>"$dir/failures"',
        '    first=$(head -n %d -- "$dir/failures" | sort -u)' % k,
        '    if (( $(wc -l <"$dir/failures") >= %d )) && [[ $first != *$\'\\n\'* ]]; then' % k,
        '        echo "%s" >"$dir/stopped"' % stopped,
        '        scontrol hold "$SLURM_ARRAY_JOB_ID" >/dev/null 2>&1 || true',
        '        echo "slurmkit: canary: $(<"$dir/stopped")" >&2',
        "    fi",
        "}",
    ]


def array_script(rendered: str, *, sweep_id: str, sweep_dir: str, table: str, sentinels: Sequence[str],
                 array: str, extra_directives: Sequence[str] = (), table_file: Optional[Tuple[str, str]] = None,
                 canary: Optional[Canary] = None, template: str = "", checkpoint_sentinel: Optional[str] = None,
                 site: Optional[Site] = None) -> str:
    """The array's script from the job's rendered script (see the module docstring).

    ``table`` is the points table (:func:`points_table`); with ``table_file``,
    (path, sha256) of the same table written next to the sweep, the script
    reads that file instead.  ``array`` is the ``--array`` value.  A job
    rendered for the requeue daemon with ``checkpoint_sentinel`` as its
    checkpoint directory gets each point's own instead (the prologue's
    ``SLURMKIT_CHECKPOINT_DIR``).  The supervise loop is the one ``site``'s
    template directories hold, as for the job's own template.
    """
    lines = rendered.split("\n")
    if not _BASH_RE.match(lines[0]):
        raise ConfigError("template %s does not start with a bash #! line (%r); a sweep's tasks need bash to find "
                          "their point" % (template or "?", lines[0][:60]))
    first_command = next((i for i in range(1, len(lines)) if lines[i].strip() and not lines[i].lstrip().startswith("#")),
                         len(lines))
    last_directive = max((i for i in range(1, first_command) if lines[i].startswith("#SBATCH ")), default=None)
    if last_directive is None:
        raise ConfigError("template %s has no #SBATCH lines" % (template or "?"))
    body = "\n".join(lines[first_command:])
    for k, mark in enumerate(sentinels):
        body, count = re.subn(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(mark),
                              '"${slurmkit_sweep_words[%d]}"' % k, body)
        if not count:
            raise UsageError("template %s does not print the command where a sweep can put each point's values; "
                             "use a built-in template (single, srun, torchrun)" % (template or "?"))
    if checkpoint_sentinel is not None:
        body, count = re.subn(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(checkpoint_sentinel),
                              '"$SLURMKIT_CHECKPOINT_DIR"', body)
        if not count:
            raise UsageError("template %s does not export SLURMKIT_CHECKPOINT_DIR where the requeue daemon needs it; "
                             "use a built-in template (single, srun, torchrun)" % (template or "?"))
    directives = ["#SBATCH --array=%s" % array] + ["#SBATCH %s" % d for d in extra_directives]
    head = lines[:last_directive + 1] + directives + lines[last_directive + 1:first_command]
    # The task is a function of the script, so the supervising shell starts it as a subshell.  The
    # trailer moves to the very end: the submit-once wrapper checks that the whole script, table
    # included, arrived.
    if not body.endswith("\n"):
        body += "\n"
    if body.endswith("\n" + SCRIPT_TRAILER + "\n"):
        body = body[:-len(SCRIPT_TRAILER) - 1]
    task = "slurmkit_sweep_task() {\n" + body + "}\n"
    before = "\n".join(head) + "\n"
    after = task + _supervisor(sweep_id, canary, site)
    if table_file is not None:
        return before + _prologue(sweep_id, sweep_dir, table_file, 0) + after + SCRIPT_TRAILER + "\n"
    skip = before.count("\n") + _prologue(sweep_id, sweep_dir, None, 0).count("\n") + after.count("\n")
    return before + _prologue(sweep_id, sweep_dir, None, skip) + after + table + SCRIPT_TRAILER + "\n"


