# Where PyTorch's step goes: bench/torch_llama_bench.py's model and step (MODEL=gpt2:
# bench/torch_gpt2_bench.py's; the file's code up to its warm-up or timing loop) under
# torch.profiler for three steps after five,
# GPU kernel times summed a step: by kind (matmul, attention, optimizer, Triton, other),
# the 45 longest kernels, and aten's matmuls by shape. To set beside mt-train's
# MT_CUDA_PROFILE=1 on the same GPU (docs/perf-log.md, 2026-11-28, fifth session).
#   B=8 python3 bench/torch_llama_profile.py      (run from the repository root)
#   MODEL=gpt2 B=64 python3 bench/torch_llama_profile.py
import collections, os
import torch
from torch.profiler import profile, ProfilerActivity

gpt2 = os.environ.get("MODEL", "llama") == "gpt2"
src = open("bench/torch_gpt2_bench.py" if gpt2 else "bench/torch_llama_bench.py").read()
exec(src[: src.index("for i in range(5): one(i)" if gpt2 else "for i in range(4): one(i)")])
for i in range(5):
    one(i)
torch.cuda.synchronize()
N = 3
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
    for i in range(N):
        one(i)
    torch.cuda.synchronize()

def dtime(e):
    return getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)

def kind(n):
    l = n.lower()
    if "flash" in l or "fmha" in l or "attention" in l or "dot_do_o" in l or "convert_dq" in l:
        return "attention"
    if "nvjet" in l or "gemm" in l or "xmma" in l or "cutlass" in l:
        return "matmul"
    if "adam" in l or "multi_tensor" in l or "foreach" in l:
        return "optimizer"
    if "triton" in l:
        return "triton"
    return "other"

by = collections.defaultdict(lambda: [0.0, 0])
for e in prof.events():
    # kernels only: torch.compile's "## Call CompiledFxGraph" ranges would count twice
    if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("## "):
        by[e.name][0] += dtime(e)
        by[e.name][1] += 1
print(f"kernels' sum {sum(v[0] for v in by.values()) / N / 1e3:.2f} ms a step")
kinds = collections.defaultdict(float)
for n, v in by.items():
    kinds[kind(n)] += v[0] / N / 1e3
for k, v in sorted(kinds.items(), key=lambda x: -x[1]):
    print(f"  {k:10s} {v:8.2f} ms")
print("longest kernels (ms a step, calls a step):")
for n, v in sorted(by.items(), key=lambda x: -x[1][0])[:45]:
    print(f"  {v[0] / N / 1e3:8.3f} {v[1] / N:6.1f}  {kind(n):9s} {n[:150]}")
print("aten matmuls by shape (ms a step, calls a step):")
for a in prof.key_averages(group_by_input_shape=True):
    if a.key in ("aten::mm", "aten::addmm", "aten::bmm") and dtime(a) > 0:
        print(f"  {a.key:12s} {dtime(a) / N / 1e3:8.3f} {a.count / N:5.1f} {a.input_shapes}")
