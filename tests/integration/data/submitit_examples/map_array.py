# docs/examples.md, "Job arrays": the explained example's executor (%j in the folder, 4 minutes), the partition
# ("dev" there), and the jobs' ids and results printed.
import submitit

def add(a, b):
    return a + b

log_folder = "log_test/%j"
a = [1, 2, 3, 4]
b = [10, 20, 30, 40]
executor = submitit.AutoExecutor(folder=log_folder)
executor.update_parameters(timeout_min=4, slurm_partition="cpu")
# the following line tells the scheduler to only run\
# at most 2 jobs at once. By default, this is several hundreds
executor.update_parameters(slurm_array_parallelism=2)
jobs = executor.map_array(add, a, b)  # just a list of jobs
print([job.job_id for job in jobs])
print([job.result() for job in jobs])
