"""Where a command's independent points (and ``nfeval train``) run: here, or as Slurm jobs.

``--launcher local`` (the default) keeps each command's own process pool. ``--launcher slurm`` submits
the points that are not finished yet as one Slurm job array through submitit: a job per point, each
resumable (a preempted or timed-out job checkpoints by being requeued, and the point resumes from its
own checkpoint the way a rerun here would), the job IDs recorded in ``<folder>/slurm_jobs.json``. A rerun
of the same command submits only the points that are neither finished (the point's own finished
marker) nor still queued or running. ``options`` holds the flags; ``jobs`` what runs in a job (light:
submitit and the standard library, torch only once the job runs); ``cluster`` the submitting, waiting
and collecting; ``records`` the job record and the job states.
"""
