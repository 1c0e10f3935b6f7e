# hpcwizard verify --bandwidth: a torch.distributed all_reduce's bus bandwidth across two
# instances, started through the launch script (cluster/torch-busbw). busbw as nccl-tests
# defines it (doc/PERFORMANCE.md): algbw = bytes / time of one all_reduce, busbw = algbw *
# 2(n-1)/n, n the ranks; the time is the slowest rank's mean over the timed iterations.
import os, time, torch, torch.distributed as dist
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, n = dist.get_rank(), dist.get_world_size()
if backend == "nccl":
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    nbytes, warmup, iters = 1 << 30, 5, 20
else:
    dev = torch.device("cpu")
    nbytes, warmup, iters = 64 << 20, 2, 5
sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
t = torch.zeros(nbytes // 4, dtype=torch.float32, device=dev)
for _ in range(warmup):
    dist.all_reduce(t)
sync()
dist.barrier()
t0 = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(t)
sync()
took = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=dev)
dist.all_reduce(took, op=dist.ReduceOp.MAX)
seconds = took.item()
algbw = nbytes / seconds / 1e9
if rank == 0:
    print(f"HPCWIZARD-BUSBW size={n} backend={backend} bytes={nbytes} seconds={seconds:.6f} "
          f"algbw={algbw:.3f} busbw={algbw * 2 * (n - 1) / n:.3f}", flush=True)
dist.destroy_process_group()
