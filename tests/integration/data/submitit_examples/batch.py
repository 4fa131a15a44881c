# docs/examples.md, "Job arrays through a context manager": myfunc and whatever made concrete, the jobs' ids and
# results printed after the block.
import submitit

def myfunc(arg):
    return arg * arg

whatever = [3, 4, 5]
executor = submitit.AutoExecutor(folder="log_test")
executor.update_parameters(timeout_min=4, slurm_partition="cpu")
jobs = []
with executor.batch():
    for arg in whatever:
        job = executor.submit(myfunc, arg)
        jobs.append(job)
print([job.job_id for job in jobs])
print([job.result() for job in jobs])
