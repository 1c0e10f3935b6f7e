"""The plan as the file an engine takes: a Slurm batch script (slurm), and Kubernetes jobs of
the Kubeflow MPI Operator, Kubeflow's PyTorchJob and TrainJob, and Volcano (one module each).
Each renderer is plan -> text, registered in hpcwizard.export.export_formats()."""

# The engines' export format names, in the order the CLI and the wizard list them. Here, apart
# from their renderers, so that the CLI's parser names them without importing the planner
# (tests/test_engines.py holds the two equal).
FORMATS = ("sbatch", "mpijob", "pytorchjob", "trainjob", "volcano")
