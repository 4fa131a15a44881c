# docs/examples.md, "Multi-tasks jobs": 2 nodes x 3 tasks; my_func's process() made concrete (a sum), its
# chunks by the global rank (the docs chunk by the local rank, which gives every node the same chunks), and
# results() where the docs call result(): submitit 1.5.4's result() refuses a job of several tasks.
import submitit
from math import ceil
from operator import add

def process(chunk):
    return sum(chunk)

def my_func(inputs):
    job_env = submitit.JobEnvironment()
    print(f"There are {job_env.num_tasks} in this job")
    print(f"I'm the task #{job_env.local_rank} on the node {job_env.node}")
    print(f"I'm the task #{job_env.global_rank} in the job")
    num_items_per_task = int(ceil(len(inputs) / job_env.num_tasks))
    r = job_env.global_rank
    task_chunk = inputs[r * num_items_per_task: (r + 1) * num_items_per_task]
    return (job_env.global_rank, job_env.local_rank, job_env.node, job_env.num_tasks, process(task_chunk))

executor = submitit.AutoExecutor(folder="log_test")
# 3 * 2 = 6 tasks
executor.update_parameters(tasks_per_node=3, nodes=2, timeout_min=4, slurm_partition="cpu")
job = executor.submit(add, 5, 7)  # will compute add(5, 7)
print(job.task(2).result())  # Wait for task #2 result
print(job.results())  # Wait for all tasks and returns a list of results.
job = executor.submit(my_func, list(range(12)))
print(job.results())
