"""What travels between the submitting process and a job: the calls, and their outcomes.

Both are text files: one JSON header line, then base64 lines of cloudpickles.  A calls file
holds the function once and one line of arguments per call: line ``i`` is the call of array
task ``i`` (``map_array``: one file for a whole array), the only line for ``submit``.  Text, so
that they go over the connection a cluster already has (:class:`slurmkit.clusterfiles.
ClusterFiles` writes and reads text) and no shared filesystem is assumed.  The call's
header says which Python and which cloudpickle pickled it; the outcome's says whether
the call returned or raised, with the exception's type, message and formatted traceback
(readable even where the exception itself cannot be unpickled here).

:data:`BOOTSTRAP` is the program each task runs (``PYTHON -c BOOTSTRAP CALL RESULT CHECKPOINT JOB``):
it needs cloudpickle on the nodes, not slurmkit, and turns every way of failing before the
call (no cloudpickle, another Python, a call that cannot be unpickled) into an outcome
with one sentence saying what to do, instead of a traceback in the job's log only.

Checkpointing, submitit's protocol on Slurm's own requeue: when the callable has
``__submitit_checkpoint__`` or ``checkpoint`` (:class:`slurmkit.helpers.Checkpointable`),
task 0 answers SIGUSR1 (the executor asks for it before the time limit, ``--signal``; a
preemption or ``scancel --signal=USR1`` sends it too) by calling it with the call's
arguments; the submission it returns is written as a calls file of one call at
``CHECKPOINT`` (the task's own file, so an array's tasks never write one file; renamed into
place, so a restart reads the old call or the new one, never half of one), then
``scontrol requeue`` gives the job back to Slurm and the task exits 75 (slurmkit's "saved,
resume me", :data:`slurmkit.requeue.daemon.EXIT_SAVED`).  Slurm starts the same job id
again, so a :class:`~slurmkit.api.job.Job` follows it with nothing to learn, with or
without the submitting process, over SSH or not; a task that finds ``CHECKPOINT`` runs
that call instead of the submitted one.  Slurm's requeue and not the requeue daemon, by
default: the daemon restarts a failure as a *new* job from a checkpoint directory it reads
itself, and none of that needs to happen for a call that saved its own state.

Under the requeue daemon (``auto_requeue=True``: the job script exports
``SLURMKIT_CHECKPOINT_DIR``), USR1 saves the call as above and also as the daemon's
checkpoint ``step-ATTEMPT.call`` in that directory, asks Slurm for nothing and exits 75: the
daemon restarts the job as a new one (after a node failure or a preemption too), and a
restart reads the task's own checkpoint, else the ``.call`` the daemon chose
(``SLURMKIT_RESUME_FROM``).  The Job follows the daemon's attempts (:mod:`slurmkit.api.job`).
"""

import base64
import json
import sys
from typing import NamedTuple, Optional

FORMAT = 1

# The task side.  argv: the calls file, the outcome's file (%t: the task's rank, %a: the array task's
# index), the task's checkpoint (%a; optional, may be empty), JSON of the site's cluster name and
# Slurm's log (%a; optional), which the call reads through helpers.JobEnvironment.  Kept free of
# slurmkit imports: the nodes' Python need not have slurmkit.
BOOTSTRAP = r'''
import base64, json, os, signal, socket, subprocess, sys, time, traceback
started = time.time()
index = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
rank = os.environ.get("SLURM_PROCID", "0")
call_path = sys.argv[1]
result_path = sys.argv[2].replace("%t", rank).replace("%a", index)
checkpoint_path = sys.argv[3].replace("%a", index) if len(sys.argv) > 3 and sys.argv[3] else None
given = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
# Under the requeue daemon (auto_requeue=True) the job script exports its checkpoint directory, and on a
# restart the checkpoint the daemon chose: a saved call that a restart on another node may only see there.
daemon_dir = os.environ.get("SLURMKIT_CHECKPOINT_DIR")
resumed = None
if checkpoint_path and os.path.exists(checkpoint_path):
    resumed = checkpoint_path
elif daemon_dir:
    chosen = os.environ.get("SLURMKIT_RESUME_FROM", "")
    if chosen.endswith(".call") and os.path.exists(chosen):
        resumed = chosen
node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
# For JobEnvironment().paths inside the call (and any process it starts).
# The cluster it runs on: the requeue daemon's export where a restart may have moved it, else the executor's.
os.environ["SLURMKIT_JOB"] = json.dumps({"cluster": os.environ.get("SLURMKIT_CLUSTER") or given.get("cluster", ""),
                                         "folder": os.path.dirname(call_path),
                                         "call": call_path, "result": result_path,
                                         "log": given.get("log", "").replace("%a", index),
                                         "checkpoint": checkpoint_path})
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
with open(resumed or call_path) as f:
    lines = f.read().split("\n")
head = json.loads(lines[0])
here = "%d.%d" % sys.version_info[:2]
if head.get("submitit"):
    # Pickled under `python -m slurmkit.compat`: an `import submitit` inside the call means slurmkit here too.
    try:
        import slurmkit.compat
        slurmkit.compat.install()
    except Exception:
        pass
if head["python"] != here:
    refuse("PythonVersionError", "the call was pickled by Python %s and %s on node %s is Python %s: name a "
           "Python %s for the cluster (the executor's python=, or the site's api_python)"
           % (head["python"], sys.executable, node, here, head["python"]))
try:
    line = base64.b64decode(lines[2 + (int(index) if head.get("array") else 0)])
    if head.get("each"):      # a batch: each call with its own function
        fn, args, kwargs = cloudpickle.loads(line)
    else:
        fn = cloudpickle.loads(base64.b64decode(lines[1]))
        args, kwargs = cloudpickle.loads(line)
except Exception as exc:
    refuse(type(exc).__name__, "the call could not be unpickled by %s on node %s: %s: %s (a module the "
           "function needs is not importable there?)" % (sys.executable, node, type(exc).__name__, exc))
if resumed:
    print("slurmkit: resuming from the checkpoint %s (restart %s)" % (resumed, os.environ.get(
          "SLURMKIT_ATTEMPT") or os.environ.get("SLURM_RESTART_COUNT", "?")), file=sys.stderr, flush=True)
checkpointer = getattr(fn, "__submitit_checkpoint__", None) or getattr(fn, "checkpoint", None)
timeouts = int(head.get("timeouts", 0))     # restarts after a time limit so far (the saved call's header)
def save_and_requeue(signum, frame):
    # Task 0 saves and gives the job back for every task (Slurm requeues the whole job).
    # A USR1 within the signal's window before the time limit (Slurm checks every 30 s or so) is the limit's:
    # counted, and past the executor's max_num_timeout (submitit's, 3) the job ends instead of a restart.
    limit, window = given.get("time_limit_s"), given.get("signal_s", 90) + 60
    timed_out = limit is not None and time.time() - started >= limit - window
    count = timeouts + (1 if timed_out else 0)
    print("slurmkit: SIGUSR1 on node %s (%s): checkpointing the call" % (node, "its time limit is near"
          if timed_out else "a preemption, or sent by hand"), file=sys.stderr, flush=True)
    if count > int(given.get("max_num_timeout", 3)):
        message = ("Job not requeued because: timed-out too many times (%d; max_num_timeout=%d)."
                   % (count, int(given.get("max_num_timeout", 3))))
        print("slurmkit: " + message, file=sys.stderr, flush=True)
        write({"outcome": "error", "type": "UncompletedJobError", "message": message, "traceback": ""})
        sys.stdout.flush()
        os._exit(1)
    try:
        delayed = checkpointer(*args, **kwargs)
    except BaseException as exc:
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        write({"outcome": "error", "type": type(exc).__name__, "message": "checkpoint() raised %s: %s (the job is "
               "not restarted)" % (type(exc).__name__, exc), "traceback": tb})
        sys.stderr.flush()
        os._exit(1)
    if delayed is None:
        print("slurmkit: checkpoint() returned None: the job is not restarted", file=sys.stderr, flush=True)
        return
    head = {"format": 1, "python": here, "cloudpickle": cloudpickle.__version__, "array": False, "calls": 1,
            "checkpoint": True, "timeouts": count}
    text = "\n".join([json.dumps(head), base64.b64encode(cloudpickle.dumps(delayed.function)).decode("ascii"),
                      base64.b64encode(cloudpickle.dumps((tuple(delayed.args), dict(delayed.kwargs)))).decode("ascii")])
    tmp = "%s.tmp.%d" % (checkpoint_path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, checkpoint_path)
    if daemon_dir:
        # The daemon restarts the job as a new one, from its newest checkpoint: the saved call, as the step of
        # this attempt (its `file` convention; the temporary name is one it skips).  No scontrol requeue.
        attempt = int(os.environ.get("SLURMKIT_ATTEMPT") or 1)
        step = os.path.join(daemon_dir, "step-%d.call" % attempt)
        try:
            tmp = os.path.join(daemon_dir, ".step-%d.call.tmp.%d" % (attempt, os.getpid()))
            with open(tmp, "w") as f:
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, step)
            print("slurmkit: saved in %s and %s; the requeue daemon restarts the job" % (checkpoint_path, step),
                  file=sys.stderr, flush=True)
        except OSError as exc:
            print("slurmkit: saved in %s, but not in the requeue daemon's checkpoint directory (%s): a time limit "
                  "is not restarted from it, a node failure is" % (checkpoint_path, exc), file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(75)
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job = "%s_%s" % (os.environ["SLURM_ARRAY_JOB_ID"], index)
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        why = done.stderr.strip() if done.returncode else ""
    except (OSError, subprocess.SubprocessError) as exc:
        why = str(exc)
    if why:
        print("slurmkit: the call is saved in %s, but scontrol requeue %s failed (%s): the job is not restarted; "
              "submit the saved call again, or allow requeues (auto_requeue=True)" % (checkpoint_path, job, why),
              file=sys.stderr, flush=True)
    else:
        print("slurmkit: saved in %s; job %s requeued" % (checkpoint_path, job), file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(75)      # EXIT_SAVED; not sys.exit: the call's own except clauses must not catch it
if checkpoint_path and callable(checkpointer):
    signal.signal(signal.SIGUSR1, save_and_requeue if rank == "0" else signal.SIG_IGN)
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
    ``(args, kwargs)``; ``array``: array task ``i`` runs call ``i``, else the one call runs.  ``fn``
    None: each call is ``(function, args, kwargs)`` (a batch of different functions), pickled together."""
    import cloudpickle

    if "slurmkit.helpers" in sys.modules:
        # Checkpointable and DelayedSubmission travel with the call: the nodes need no slurmkit.
        cloudpickle.register_pickle_by_value(sys.modules["slurmkit.helpers"])
    each = fn is None
    calls = [(f, tuple(args), dict(kwargs)) for f, args, kwargs in calls] if each else \
        [(tuple(args), dict(kwargs)) for args, kwargs in calls]
    if not array and len(calls) != 1:
        raise ValueError("a calls file of a job that is no array holds one call")
    head = {"format": FORMAT, "python": python_version(), "cloudpickle": cloudpickle.__version__,
            "array": bool(array), "calls": len(calls)}
    if each:
        head["each"] = True
    compat = sys.modules.get("slurmkit.compat")
    if compat is not None and sys.modules.get("submitit") is compat:
        head["submitit"] = True      # the bootstrap makes `import submitit` give slurmkit.compat too
    lines = [json.dumps(head), "" if each else base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")]
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
