# submitit's README example, word for word but the partition (the docs' "dev" is this site's "cpu").
import submitit

def add(a, b):
    return a + b

# executor is the submission interface (logs are dumped in the folder)
executor = submitit.AutoExecutor(folder="log_test")
# set timeout in min, and partition for running the job
# timeout_min 1 in submitit's docs; 4 here: submitit asks Slurm for USR2 90 s before the limit
# (slurm_signal_delay_s), so with 1 minute the signal was due before the start, and Slurm's once-a-minute
# check delivered it while Python was still starting (24.11, one run): submitit's own job died of it.
executor.update_parameters(timeout_min=4, slurm_partition="cpu")
job = executor.submit(add, 5, 7)  # will compute add(5, 7)
print(job.job_id)  # ID of your job

output = job.result()  # waits for completion and returns output
assert output == 12  # 5 + 7 = 12...  your addition was computed in the cluster
print(output)
