# hpcwizard verify: a torch.distributed all_reduce across two instances, started through
# the launch script (cluster/torch-allreduce).
import os, torch, torch.distributed as dist
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, size = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(dev)
t = torch.tensor([float(rank + 1)], device=dev)
dist.all_reduce(t)
print(f"HPCWIZARD-ALLREDUCE rank={rank} size={size} backend={backend} sum={t.item():g} "
      f"expected={size * (size + 1) / 2:g}", flush=True)
dist.destroy_process_group()
