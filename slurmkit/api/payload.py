"""What travels between the submitting process and a job: the calls, and their outcomes.

Both are text files: one JSON header line, then base64 lines of cloudpickles.  A calls file
holds the function once and one line of arguments per call: line ``i`` is the call of array
task ``i`` (``map_array``: one file for a whole array), the only line for ``submit``.  Text, so
that they go over the connection a cluster already has (:class:`slurmkit.clusterfiles.
ClusterFiles` writes and reads text) and no shared filesystem is assumed.  The call's
header says which Python and which cloudpickle pickled it; the outcome's says whether
the call returned or raised, with the exception's type, message and formatted traceback
(readable even where the exception itself cannot be unpickled here).

:data:`BOOTSTRAP` is the program each task runs (``PYTHON -c BOOTSTRAP CALL RESULT``): it
needs cloudpickle on the nodes, not slurmkit, and turns every way of failing before the
call (no cloudpickle, another Python, a call that cannot be unpickled) into an outcome
with one sentence saying what to do, instead of a traceback in the job's log only.
"""

import base64
import json
import sys
from typing import NamedTuple, Optional

FORMAT = 1

# The task side.  argv: the calls file, the outcome's file (%t: the task's rank, %a: the array task's
# index).  Kept free of slurmkit imports: the nodes' Python need not have slurmkit.
BOOTSTRAP = r'''
import base64, json, os, socket, sys, traceback
index = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
call_path = sys.argv[1]
result_path = sys.argv[2].replace("%t", os.environ.get("SLURM_PROCID", "0")).replace("%a", index)
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
def write(head, body=b""):
    head["format"] = 1
    tmp = "%s.tmp.%d" % (result_path, os.getpid())
    with open(tmp, "w") as f:
        f.write(json.dumps(head) + "\n" + base64.b64encode(body).decode("ascii") + "\n")
    os.replace(tmp, result_path)
def refuse(kind, message):
    write({"outcome": "error", "type": kind, "message": message, "traceback": ""})
    print("slurmkit: error: " + message, file=sys.stderr)
    sys.exit(1)
try:
    import cloudpickle
except ImportError:
    refuse("ImportError", "cloudpickle is not importable by %s on node %s: install it into that Python "
           "(pip install cloudpickle), or name another with the executor's python=" % (sys.executable, node))
with open(call_path) as f:
    lines = f.read().split("\n")
head = json.loads(lines[0])
here = "%d.%d" % sys.version_info[:2]
if head["python"] != here:
    refuse("PythonVersionError", "the call was pickled by Python %s and %s on node %s is Python %s: name a "
           "Python %s for the cluster (the executor's python=, or the site's api_python)"
           % (head["python"], sys.executable, node, here, head["python"]))
try:
    fn = cloudpickle.loads(base64.b64decode(lines[1]))
    args, kwargs = cloudpickle.loads(base64.b64decode(lines[2 + (int(index) if head.get("array") else 0)]))
except Exception as exc:
    refuse(type(exc).__name__, "the call could not be unpickled by %s on node %s: %s: %s (a module the "
           "function needs is not importable there?)" % (sys.executable, node, type(exc).__name__, exc))
try:
    value = fn(*args, **kwargs)
except BaseException as exc:
    tb = traceback.format_exc()
    sys.stderr.write(tb)
    try:
        body = cloudpickle.dumps(exc)
    except Exception:
        body = b""
    write({"outcome": "error", "type": type(exc).__name__, "message": str(exc), "traceback": tb}, body)
    sys.exit(1)
write({"outcome": "success"}, cloudpickle.dumps(value))
'''


class Outcome(NamedTuple):
    """What a task's call came to: ``ok`` with its ``value``, or the exception's ``type``, ``message``,
    ``traceback`` (as formatted on the node) and the exception itself where it could be unpickled."""

    ok: bool
    value: object = None
    type: str = ""
    message: str = ""
    traceback: str = ""
    exception: Optional[BaseException] = None


def python_version() -> str:
    return "%d.%d" % sys.version_info[:2]


def dump_calls(fn, calls, array: bool = False) -> str:
    """The text of a calls file (what :data:`BOOTSTRAP` reads): ``fn`` once, then each call's
    ``(args, kwargs)``; ``array``: array task ``i`` runs call ``i``, else the one call runs."""
    import cloudpickle

    calls = [(tuple(args), dict(kwargs)) for args, kwargs in calls]
    if not array and len(calls) != 1:
        raise ValueError("a calls file of a job that is no array holds one call")
    head = {"format": FORMAT, "python": python_version(), "cloudpickle": cloudpickle.__version__,
            "array": bool(array), "calls": len(calls)}
    lines = [json.dumps(head), base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")]
    lines += [base64.b64encode(cloudpickle.dumps(call)).decode("ascii") for call in calls]
    return "\n".join(lines) + "\n"


def dump_call(fn, args, kwargs) -> str:
    """The calls file of one call."""
    return dump_calls(fn, [(args, kwargs)])


def load_outcome(text: str) -> Outcome:
    """An outcome file's text; ValueError when it is not one (half-written files are never seen:
    the task renames it into place)."""
    head_text, _, body_text = text.partition("\n")
    head = json.loads(head_text)
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("outcome") not in ("success", "error"):
        raise ValueError("not an outcome of format %d" % FORMAT)
    body = base64.b64decode(body_text.strip() or b"")
    if head["outcome"] == "success":
        import cloudpickle  # noqa: F401  (the value may hold objects pickled by value)
        import pickle

        return Outcome(True, pickle.loads(body))
    exception = None
    if body:
        try:
            import pickle

            exception = pickle.loads(body)
        except Exception:   # a class this process cannot import: the text is what is left
            exception = None
    return Outcome(False, type=str(head.get("type", "")), message=str(head.get("message", "")),
                   traceback=str(head.get("traceback", "")), exception=exception)
