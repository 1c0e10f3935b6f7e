import json, sys, torch, torch.distributed as d
cuda = torch.cuda.is_available()
print("HPCWIZARD-TORCH " + json.dumps({
    "torch": torch.__version__, "python": sys.executable, "cuda": cuda,
    "dist": d.is_available(), "nccl": d.is_available() and d.is_nccl_available(),
    "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else ""}))
