# hpcwizard verify: a torch.distributed all_reduce across two instances, started through
# the launch script (cluster/torch-allreduce): one line per rank, NPROC_PER_NODE on each.
import os, torch, torch.distributed as dist
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, size = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", 0))
dev = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
if backend == "nccl":
    torch.cuda.set_device(dev)
# float64: a sum of ranks stays exact past float32's 2**24 (about 5800 ranks)
t = torch.tensor([float(rank + 1)], dtype=torch.float64, device=dev)
dist.all_reduce(t)
# One write of the whole line: the ranks of an instance share its stdout, and print's text
# and newline can go out apart (unbuffered stdout) and interleave with another rank's.
line = (f"HPCWIZARD-ALLREDUCE rank={rank} size={size} backend={backend} sum={t.item():.0f} "
        f"expected={size * (size + 1) // 2} local={local} "
        f"node={os.environ.get('GROUP_RANK', '')}\n")
os.write(1, line.encode())
dist.destroy_process_group()
