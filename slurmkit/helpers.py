"""submitit's checkpointing helpers: :class:`DelayedSubmission` and :class:`Checkpointable`.

A callable whose class has a ``checkpoint(self, *args, **kwargs)`` method (or
``__submitit_checkpoint__``) is asked, on Slurm's USR1 before its time limit or on
preemption, for the call to run instead when the job restarts: a :class:`DelayedSubmission`.
:class:`Checkpointable`'s own ``checkpoint`` returns the same callable with the same
arguments, so a callable that keeps its progress in its attributes resumes from it
(docs/researcher/python-api.md, "Checkpointing").

Standard library only, and no slurmkit import: these classes run *on the nodes*, where
slurmkit need not be installed.  :func:`slurmkit.api.payload.dump_calls` has cloudpickle
carry this module by value, so a subclass of :class:`Checkpointable` unpickles where only
cloudpickle is, and the task's bootstrap knows a submission by its three attributes
(``function``, ``args``, ``kwargs``), not by its class.
"""


class DelayedSubmission:
    """A call not made yet: ``function(*args, **kwargs)``, as submitit names it.  What a
    ``checkpoint`` method returns; ``result()`` makes the call once (submitit's
    ``FunctionSequence`` style of keeping finished calls' values across a restart)."""

    def __init__(self, function, *args, **kwargs):
        if not callable(function):
            raise TypeError("DelayedSubmission: %r is not callable" % (function,))
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self._done = False
        self._result = None

    def result(self):
        """The call's value, made now unless it was made before (then kept, pickles and all)."""
        if not self._done:
            self._result = self.function(*self.args, **self.kwargs)
            self._done = True
        return self._result

    def done(self) -> bool:
        return self._done

    def __repr__(self):
        return "DelayedSubmission(%s, %d args, %d kwargs)" % (
            getattr(self.function, "__name__", type(self.function).__name__), len(self.args), len(self.kwargs))


class Checkpointable:
    """A callable class whose state is its progress: on USR1 (before the time limit, or on
    preemption) its ``checkpoint`` resubmits itself, as it is at that moment, with the
    arguments of the call; the restarted job calls it again.  ``__call__`` is the caller's
    to write, and reads its attributes to know where it stopped.  Override ``checkpoint``
    to keep less (save a model to a file and drop it from the state, change arguments);
    return None from it to not be restarted."""

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls)
        if not callable(instance):
            raise TypeError("%s is Checkpointable but has no __call__ method: give it one (the call the job "
                            "runs)" % cls.__name__)
        return instance

    def checkpoint(self, *args, **kwargs) -> DelayedSubmission:
        """The same callable (with its state now) and the same arguments."""
        return DelayedSubmission(self, *args, **kwargs)
