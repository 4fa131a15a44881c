# docs/checkpointing.md, "Example - Training and checkpointing a model", made to run: the "model" is a dict
# dumped as JSON, training counts to 20 and waits at step 7 on its first run for the interruption the docs
# suggest to test with (job._interrupt()); the partition is this site's and no GPU is asked (cpu has none).
import json
import os
import time
from pathlib import Path

import submitit


class NetworkTraining:

    def __init__(self):
        # this is the "state" which we will be able to access when checkpointing:
        self.model = None

    def __call__(self, checkpointpath: str):
        if not Path(checkpointpath).exists():
            self.model = {"step": 0, "starts": []}  # initialize your model
        else:
            self.model = json.loads(Path(checkpointpath).read_text())  # load your model
        # train your model
        self.model["starts"].append(self.model["step"])
        while self.model["step"] < 20:
            if self.model["step"] == 7 and len(self.model["starts"]) == 1:
                Path(checkpointpath + ".paused").touch()
                while True:            # until the interruption
                    time.sleep(0.1)
            self.model["step"] += 1
        return self.model

    def checkpoint(self, checkpointpath: str) -> submitit.helpers.DelayedSubmission:
        # the checkpoint method is called asynchroneously when the slurm manager
        # sends a preemption signal, with the same arguments as the __call__ method
        # "self" is your callable, at its current state.
        # "self" therefore holds the current version of the model:
        # do whatever you need to do to dump it properly
        Path(checkpointpath).write_text(json.dumps(self.model))
        # create a new, clean (= no loaded model) NetworkTraining instance which
        # will be loaded when the job resumes, and will fetch the dumped model
        training_callable = NetworkTraining()
        # Resubmission to the queue is performed through the DelayedSubmission object
        return submitit.helpers.DelayedSubmission(training_callable, checkpointpath)


if __name__ == "__main__":
    executor = submitit.AutoExecutor(folder="logs_training", slurm_max_num_timeout=3)
    executor.update_parameters(timeout_min=30, slurm_partition="cpu", cpus_per_task=2)
    training_callable = NetworkTraining()
    path = os.path.abspath("model.json")
    job = executor.submit(training_callable, path)
    while not Path(path + ".paused").exists():
        time.sleep(0.2)
    job._interrupt()       # a preemption, as the docs test one
    print(job.result())
