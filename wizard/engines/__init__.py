"""The plan as the file an engine takes: a Slurm batch script (slurm), and Kubernetes jobs of
the Kubeflow MPI Operator, Kubeflow's PyTorchJob and TrainJob, and Volcano (one module each).
Each renderer is plan -> text, registered in hpcwizard.export.export_formats()."""

from ..vocab import ENGINE_EXPORTS as FORMATS  # the engines' format names

__all__ = ["FORMATS"]
