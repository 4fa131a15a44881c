# docs/examples.md, "Errors": what job.result() raises and what job.stderr() holds, printed.
import submitit
from operator import truediv

executor = submitit.AutoExecutor(folder="log_test")
# timeout_min 1 in submitit's docs; 4 here: submitit asks Slurm for USR2 90 s before the limit
# (slurm_signal_delay_s), so with 1 minute the signal was due before the start, and Slurm's once-a-minute
# check delivered it while Python was still starting (24.11, one run): submitit's own job died of it.
executor.update_parameters(timeout_min=4, slurm_partition="cpu")
job = executor.submit(truediv, 1, 0)

try:
    job.result()  # will raise a FailedJobError stating the ZeroDivisionError with its stacktrace
except submitit.core.utils.FailedJobError as error:
    print(type(error).__name__, "ZeroDivisionError" in str(error), isinstance(error, submitit.core.utils.UncompletedJobError))
full_stderr = job.stderr()  # recover the full stack trace if need be
print("ZeroDivisionError: division by zero" in full_stderr)
