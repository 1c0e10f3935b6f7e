"""Every file hpcwizard writes for a job, one module per output, each rendering the Job
(hpcwizard.job) and the plan's steps as text. Nothing here imports the planner."""
