"""hpcwizard: prepare a Linux container for multi-instance MPI and PyTorch jobs."""
__version__ = "0.1.0"
SUPPORTED_PYTHON = "3.9-3.13"
