"""Run readings that can block in the kernel in forked children, each with a deadline.

A ``statvfs`` on a mount whose NFS server died, an NVML call into a wedged
GPU driver, a sysfs counter read that waits for an HCA's firmware: each can
put the calling thread into uninterruptible sleep (D state) for minutes.  A
thread in D state cannot be killed, and a process cannot exit while one of
its threads is in it, so a check that did such a read itself could hang
slurmd's HealthCheckProgram.  Each such reading therefore runs in a child
made with ``fork()`` (cheap: no new interpreter, the parent's imports are
shared) that sends its JSON answer through a pipe.  A child that misses its
deadline is sent SIGKILL and abandoned: the parent reports the reading as
timed out and goes on; should the child be stuck in D state, init reaps it
once the kernel lets it go.

Fork only from a single-threaded process (the check command is one):
``run`` is never called from the sweep, which has threads.
"""

import json
import os
import select
import signal
import time
from typing import Callable, Dict, NamedTuple, Optional


class Outcome(NamedTuple):
    ok: bool
    value: object = None           # the callable's return value (JSON round-tripped) when ok
    error: str = ""                # why not: "timed out after 5s", or the exception
    timed_out: bool = False
    seconds: float = 0.0


def run(tasks: Dict[str, Callable[[], object]], timeouts: Dict[str, float]) -> Dict[str, Outcome]:
    """Run every callable in its own forked child, all at once; {name: Outcome}.

    Each callable must return something JSON can encode.  ``timeouts[name]``
    bounds its child (seconds from now).
    """
    start = time.monotonic()
    children = {}          # read fd -> (name, pid, deadline, chunks)
    for name, func in tasks.items():
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:       # the child: answer, then leave without running any parent cleanup
            os.close(read_fd)
            code = 0
            try:
                payload = json.dumps({"ok": True, "value": func()})
            except BaseException as exc:  # report everything: the parent must never wait for nothing
                payload = json.dumps({"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)})
                code = 1
            try:
                data = payload.encode("utf-8")
                while data:
                    data = data[os.write(write_fd, data):]
            finally:
                os._exit(code)
        os.close(write_fd)
        children[read_fd] = (name, pid, start + float(timeouts[name]), [])
    outcomes = {}
    while children:
        now = time.monotonic()
        for fd in [fd for fd, c in children.items() if c[2] <= now]:
            name, pid, _, _ = children.pop(fd)
            os.close(fd)
            _abandon(pid)
            outcomes[name] = Outcome(False, error="no answer within %gs" % timeouts[name], timed_out=True,
                                     seconds=now - start)
        if not children:
            break
        wait = max(0.0, min(c[2] for c in children.values()) - time.monotonic())
        ready, _, _ = select.select(list(children), [], [], wait)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                children[fd][3].append(chunk)
                continue
            name, pid, _, chunks = children.pop(fd)
            os.close(fd)
            _reap(pid)
            outcomes[name] = _decode(b"".join(chunks), time.monotonic() - start)
    return outcomes


def _decode(data: bytes, seconds: float) -> Outcome:
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        return Outcome(False, error="the reading died without an answer", seconds=seconds)
    if answer.get("ok"):
        return Outcome(True, value=answer.get("value"), seconds=seconds)
    return Outcome(False, error=answer.get("error") or "failed", seconds=seconds)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _abandon(pid: int) -> None:
    """SIGKILL, and reap only if that was immediate: a child in D state is left to init."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.005)


def single(func: Callable[[], object], timeout: float, name: str = "reading") -> Optional[Outcome]:
    """One callable in a child (see :func:`run`)."""
    return run({name: func}, {name: timeout})[name]
