# docs/examples.md, "Errors": what job.result() raises and what job.stderr() holds, printed.
import submitit
from operator import truediv

executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(timeout_min=1, slurm_partition="cpu")
job = executor.submit(truediv, 1, 0)

try:
    job.result()  # will raise a FailedJobError stating the ZeroDivisionError with its stacktrace
except submitit.core.utils.FailedJobError as error:
    print(type(error).__name__, "ZeroDivisionError" in str(error), isinstance(error, submitit.core.utils.UncompletedJobError))
full_stderr = job.stderr()  # recover the full stack trace if need be
print("ZeroDivisionError: division by zero" in full_stderr)
