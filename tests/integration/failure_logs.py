"""What the clusters said while a failing test ran, printed with its failure.

A red CI run must say why on its own: the test's assertion rarely shows that slurmctld
refused a job, a slurmd killed a step or the job itself printed a traceback.  So for each
failing integration test the report gets a section "cluster logs" with

- the lines each cluster log (slurmctld, slurmd, slurmdbd, sshd, munged, the health
  checks' last runs: every ``*.log`` under the clusters' state directory) gained since
  the test's module started, the last ``TAIL`` lines of each, and before them every such
  line that names a job id the failure text names (``gamma:6016``, ``JobId=6016``);
- the end of each job output file (``*.out``) under pytest's temporary directory or the
  repository whose name holds one of those job ids.

Since the module start, not the test's: some modules run their jobs in a module fixture
(test_requeue's scenarios), long before the test that reads the result.  Reading is
bounded (only what was appended, at most ``MAX_READ`` bytes of each file) and never
raises: a report that cannot be written must not hide the failure.
"""

import os
import re
from pathlib import Path
from typing import Dict, Iterable, List, Set

TAIL = 40              # last lines of each log
MATCHED = 40           # lines naming the failing jobs, per log
OUTPUT_TAIL = 40       # last lines of each job output file
MAX_READ = 4 << 20     # bytes read from one log at most (the end of what was appended)
MAX_SECTION = 60_000   # characters of the whole section
# Directories of the state directory that hold no cluster's logs: the container images' copies.
SKIPPED_DIRS = ("images",)

# A job id as Slurm and the tests print it: JobId=ID, job ID, jobid ID, job_id: ID.
_JOB_ID = re.compile(r"(?:\bJobId=|\bjob(?:[ _]?id)?['\"]?[ =:]\s*['\"]?)(\d{1,9})\b", re.I)


def offsets(state_dir) -> Dict[str, int]:
    """{log path: size now} for every log under the clusters' state directory, but for the container
    images kept there (a whole Debian root each, whose build logs are no cluster's and whose tens of
    thousands of files would be walked before every test module)."""
    found = {}
    for top, dirs, files in os.walk(str(state_dir)):
        if top == str(state_dir):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in files:
            if name.endswith(".log"):
                path = os.path.join(top, name)
                try:
                    found[path] = os.stat(path).st_size
                except OSError:
                    continue
    return found


def job_ids(text: str, clusters: Iterable[str] = ()) -> Set[str]:
    """The job ids a failure text names: as Slurm prints them, and as slurmkit does (CLUSTER:ID,
    for the cluster names given; any WORD:ID would take a traceback's file:line for a job)."""
    text = text or ""
    found = set(_JOB_ID.findall(text))
    names = [re.escape(c) for c in clusters if c]
    if names:
        found.update(re.findall(r"\b(?:%s):(\d{1,9})\b" % "|".join(names), text))
    return found


def _appended(path: str, since: int) -> List[str]:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = since if size >= since else 0      # a log started again (a restarted daemon)
            start = max(start, size - MAX_READ)
            f.seek(start)
            data = f.read(size - start)
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


def _mentions(line: str, ids: Iterable[str]) -> bool:
    return any(re.search(r"(?<![\d.])%s(?![\d])" % re.escape(i), line) for i in ids)


def log_excerpts(before: Dict[str, int], after: Dict[str, int], ids: Set[str]) -> List[str]:
    """One block per log that grew: its lines naming ``ids``, then its last lines."""
    blocks = []
    for path in sorted(after):
        if after[path] == before.get(path, 0) and path in before:
            continue
        lines = _appended(path, before.get(path, 0))
        if not lines:
            continue
        tail = lines[-TAIL:]
        named = [l for l in lines[:-TAIL] if ids and _mentions(l, ids)][-MATCHED:]
        text = ["==> %s (%d new lines)" % (path, len(lines))]
        if named:
            text += ["  ... lines naming job %s:" % ",".join(sorted(ids))] + named + ["  ... last lines:"]
        blocks.append("\n".join(text + tail))
    return blocks


def output_files(roots: Iterable, flat: Iterable = ()) -> List[Path]:
    """Job output files (``*.out``): anywhere under ``roots`` (pytest's temporary directory), and
    directly in each of ``flat`` (the repository, where a job without --output writes)."""
    files = []
    for root, pattern in [(r, "**/*.out") for r in roots] + [(r, "*.out") for r in flat]:
        try:
            files += [p for p in Path(root).glob(pattern) if ".devcluster" not in p.parts]
        except OSError:
            continue
    return files


def output_excerpts(files: Iterable[Path], ids: Set[str], since: float) -> List[str]:
    """The end of each job output file named for one of ``ids`` (slurmkit-NAME-ID.out), written since ``since``."""
    if not ids:
        return []
    blocks = []
    for path in sorted(set(files)):
        if not set(re.findall(r"\d+", path.name)) & ids:
            continue
        try:
            if path.stat().st_mtime < since:
                continue
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        blocks.append("\n".join(["==> %s (job output, last %d lines)" % (path, OUTPUT_TAIL)]
                                + lines[-OUTPUT_TAIL:]))
    return blocks


def section(before: Dict[str, int], state_dir, failure_text: str, since: float, clusters: Iterable[str] = (),
            output_roots: Iterable = (), output_dirs: Iterable = ()) -> str:
    """The whole "cluster logs" section of one failing test ('' where nothing was said)."""
    try:
        ids = job_ids(failure_text, clusters)
        blocks = (log_excerpts(before, offsets(state_dir), ids)
                  + output_excerpts(output_files(output_roots, output_dirs), ids, since))
    except Exception as exc:          # never hide the failure behind the report's own
        return "(cluster logs could not be read: %s)" % exc
    text = "\n\n".join(blocks)
    if len(text) > MAX_SECTION:
        text = "(first %d characters cut)\n" % (len(text) - MAX_SECTION) + text[-MAX_SECTION:]
    return text
