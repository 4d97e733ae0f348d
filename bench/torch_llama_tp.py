# PyTorch's own tensor parallelism on the Llama-style model of bench/train-tp-gpu.sh, the
# reference its mt-train runs are set beside: torch.distributed.tensor.parallel (DTensor)
# in the layout Megatron uses (query, key, value and the two SwiGLU inputs column-parallel,
# the attention's output projection and the MLP's output row-parallel; the embedding split
# by vocabulary rows, the output layer by columns with the loss computed on the split
# logits); with SP=1 the norms and the residual stream split over the sequence (all-gather
# before the column-parallel layers, reduce-scatter after the row-parallel ones). bf16
# autocast, SDPA flash attention with GQA, AdamW, gradient clipping at 1.0, mock tokens.
# Run under torchrun, one process a GPU, all of them one tensor-parallel group:
#   torchrun --nproc-per-node 2 bench/torch_llama_tp.py
# env LAYERS (24) HIDDEN (2048) HEADS (16) QGROUPS (4) FFN (5632) VOCAB (50257) SEQ (2048)
#     MICRO (4) STEPS (10) WARM (3) SP (1) COMPILE (0: eager; 1: torch.compile each block)
# Prints one line: ms/step, tokens/s per GPU and MFU (bench/train-tp-gpu.sh's formula).
import math, os, time
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
try:
    from torch.distributed.tensor import Replicate, Shard
except ImportError:  # before torch 2.4
    from torch.distributed._tensor import Replicate, Shard

e = lambda k, d: int(os.environ.get(k, d))
L, D, H, G, FF, T, B = e("LAYERS", 24), e("HIDDEN", 2048), e("HEADS", 16), e("QGROUPS", 4), e("FFN", 5632), \
    e("SEQ", 2048), e("MICRO", 4)
VOCAB, STEPS, WARM, SP, COMPILE = e("VOCAB", 50257), e("STEPS", 10), e("WARM", 3), e("SP", 1), e("COMPILE", 0)
HD = D // H
world = int(os.environ.get("WORLD_SIZE", "1"))
local = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local)
V = -(-VOCAB // (128 * world)) * 128 * world  # padded as mt pads it for this TP size
SP = SP and world > 1


class RMSNorm(nn.Module):
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.ones(D))
    def forward(s, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * s.w


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(s):
        super().__init__()
        s.wq, s.wk, s.wv = nn.Linear(D, H * HD, bias=False), nn.Linear(D, G * HD, bias=False), nn.Linear(D, G * HD, bias=False)
        s.wo = nn.Linear(H * HD, D, bias=False)
    def forward(s, x, cos, sin):
        b, t = x.shape[0], x.shape[1]
        # the local heads of this rank (-1): H / TP query heads, G / TP groups
        q = rope(s.wq(x).view(b, t, -1, HD).transpose(1, 2), cos, sin)
        k = rope(s.wk(x).view(b, t, -1, HD).transpose(1, 2), cos, sin)
        v = s.wv(x).view(b, t, -1, HD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return s.wo(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(s):
        super().__init__()
        s.w1, s.w3, s.w2 = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False), nn.Linear(FF, D, bias=False)
    def forward(s, x):
        return s.w2(F.silu(s.w1(x)) * s.w3(x))


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1, s.attn, s.n2, s.mlp = RMSNorm(), Attention(), RMSNorm(), MLP()
    def forward(s, x, cos, sin):
        x = x + s.attn(s.n1(x), cos, sin)
        return x + s.mlp(s.n2(x))


class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(V, D); s.blocks = nn.ModuleList(Block() for _ in range(L))
        s.nf = RMSNorm(); s.out = nn.Linear(D, V, bias=False)
        inv = 10000.0 ** (-torch.arange(0, HD, 2).float() / HD)
        ang = torch.outer(torch.arange(T).float(), inv)
        s.register_buffer("cos", torch.cat((ang.cos(), ang.cos()), -1), persistent=False)
        s.register_buffer("sin", torch.cat((ang.sin(), ang.sin()), -1), persistent=False)
    def forward(s, idx):
        x = s.wte(idx)
        for blk in s.blocks:
            x = blk(x, s.cos, s.sin)
        return s.out(s.nf(x))


torch.manual_seed(0)  # the same weights and tokens on every rank
with torch.device("cuda"):
    m = Llama()
nparams = sum(p.numel() for p in m.parameters())  # before the split: the whole model
if world > 1:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    mesh = init_device_mesh("cuda", (world,))
    seq = Shard(1) if SP else Replicate()
    top = {"wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
           "out": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False)}
    if SP:
        top["nf"] = SequenceParallel()
    parallelize_module(m, mesh, top)
    for blk in m.blocks:
        plan = {"attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
                "attn.wo": RowwiseParallel(output_layouts=seq),
                "mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(), "mlp.w2": RowwiseParallel(output_layouts=seq)}
        if SP:
            plan.update({"n1": SequenceParallel(), "n2": SequenceParallel(),
                         "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                                    desired_input_layouts=(Replicate(), None, None)),
                         "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))})
        parallelize_module(blk, mesh, plan)
if COMPILE:
    for i, blk in enumerate(m.blocks):
        m.blocks[i] = torch.compile(blk)

params = list(m.parameters())
# without SP the norms stay plain tensors, which foreach kernels cannot take in one list
# with DTensors: an optimizer for each kind
kinds = [[p for p in params if hasattr(p, "placements")], [p for p in params if not hasattr(p, "placements")]]
opts = [torch.optim.AdamW(k, lr=3e-4, weight_decay=0.1, foreach=True) for k in kinds if k]
data = torch.randint(0, VOCAB, (4, B, T + 1), device="cuda")


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def clip(max_norm):
    # the global norm: split gradients' squares summed over the group, replicated ones once
    cut = lambda g: hasattr(g, "placements") and any(isinstance(q, Shard) for q in g.placements)
    split = [local(p.grad) for p in params if cut(p.grad)]
    whole = [local(p.grad) for p in params if not cut(p.grad)]
    sq = torch.zeros((), device="cuda")
    if split:
        sq = torch.stack(torch._foreach_norm(split)).float().pow(2).sum()
        if world > 1:
            dist.all_reduce(sq)
    if whole:
        sq = sq + torch.stack(torch._foreach_norm(whole)).float().pow(2).sum()
    coef = torch.clamp(max_norm / (sq.sqrt() + 1e-6), max=1.0)
    for g in (split, whole):
        if g:
            torch._foreach_mul_(g, coef)


def one(i):
    x = data[i % 4]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = m(x[:, :-1])
    if world > 1:
        from torch.distributed.tensor.parallel import loss_parallel
        with loss_parallel():
            loss = F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten(0, 1))
            loss.backward()
    else:
        loss = F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten(0, 1))
        loss.backward()
    clip(1.0)
    for opt in opts:
        opt.step(); opt.zero_grad(set_to_none=True)
    return loss


for i in range(WARM):
    one(i)
torch.cuda.synchronize()
t0 = time.time()
for i in range(STEPS):
    loss = one(i)
torch.cuda.synchronize()
dt = (time.time() - t0) / STEPS
per_gpu = B * T / dt / world
mfu = per_gpu * (6 * nparams + 12 * L * D * T) / float(os.environ.get("PEAK", "989e12"))
if int(os.environ.get("RANK", "0")) == 0:
    print(f"torch TP={world} SP={int(bool(SP))} compile={COMPILE}: {dt*1e3:.1f} ms/step, {per_gpu:,.0f} tok/s per GPU, "
          f"MFU {100*mfu:.1f}% (params {nparams/1e9:.2f}B, loss {local(loss).item():.3f}, "
          f"peak mem {torch.cuda.max_memory_allocated()/2**30:.1f} GiB)|{per_gpu:.0f}", flush=True)
if world > 1:
    dist.destroy_process_group()
