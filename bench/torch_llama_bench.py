# The PyTorch anchor of bench/train-gpu.sh's Llama-style run: bench/torch_gpt2_bench.py
# adapted to a Llama-style model of about 1B parameters (16 layers, hidden 2048, 16 heads in
# 4 query groups, SwiGLU 5632, RoPE, RMSNorm, no biases, untied output, T=2048): bf16
# autocast, fused AdamW, SDPA flash attention with GQA, torch.compile. Same MFU formula.
import math, os, time
import torch, torch.nn as nn, torch.nn.functional as F

L, D, H, G, FF, V, T = 16, 2048, 16, 4, 5632, 50304, 2048
HD = D // H
B = int(os.environ.get("B", "8"))
STEPS = int(os.environ.get("STEPS", "20"))
COMPILE = os.environ.get("COMPILE", "1") == "1"

class RMSNorm(nn.Module):
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.ones(D))
    def forward(s, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * s.w

def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.n1 = RMSNorm(); s.qkv = nn.Linear(D, (H + 2 * G) * HD, bias=False); s.proj = nn.Linear(D, D, bias=False)
        s.n2 = RMSNorm(); s.fc = nn.Linear(D, 2 * FF, bias=False); s.fc2 = nn.Linear(FF, D, bias=False)
    def forward(s, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = s.qkv(s.n1(x)).split([H * HD, G * HD, G * HD], dim=2)
        q = rope(q.view(b, t, H, HD).transpose(1, 2), cos, sin)
        k = rope(k.view(b, t, G, HD).transpose(1, 2), cos, sin)
        v = v.view(b, t, G, HD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.proj(y.transpose(1, 2).contiguous().view(b, t, D))
        a, g = s.fc(s.n2(x)).chunk(2, dim=-1)
        return x + s.fc2(F.silu(a) * g)

class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(V, D); s.blocks = nn.ModuleList(Block() for _ in range(L))
        s.nf = RMSNorm(); s.out = nn.Linear(D, V, bias=False)
        inv = 10000.0 ** (-torch.arange(0, HD, 2).float() / HD)
        ang = torch.outer(torch.arange(T).float(), inv)
        s.register_buffer("cos", torch.cat((ang.cos(), ang.cos()), -1), persistent=False)
        s.register_buffer("sin", torch.cat((ang.sin(), ang.sin()), -1), persistent=False)
    def forward(s, idx, tgt):
        x = s.wte(idx)
        for blk in s.blocks: x = blk(x, s.cos, s.sin)
        logits = s.out(s.nf(x))
        return F.cross_entropy(logits.float().view(-1, V), tgt.reshape(-1))

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True
m = Llama().cuda()
nparams = sum(p.numel() for p in m.parameters())
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
step = torch.compile(m) if COMPILE else m
data = torch.randint(0, 50257, (4, B, T + 1), device="cuda")

def one(i):
    x = data[i % 4]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = step(x[:, :-1], x[:, 1:])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step(); opt.zero_grad(set_to_none=True)
    return loss

for i in range(4): one(i)
torch.cuda.synchronize()
t0 = time.time()
for i in range(STEPS): loss = one(i)
torch.cuda.synchronize()
dt = (time.time() - t0) / STEPS
tok_s = B * T / dt
flops_tok = 6 * nparams + 12 * L * D * T
mfu = flops_tok * tok_s / 989e12
print(f"torch Llama-style {nparams/1e9:.2f}B B={B} T={T} compile={COMPILE}: {dt*1e3:.1f} ms/step, {tok_s:,.0f} tok/s, "
      f"MFU {100*mfu:.1f}% (params {nparams/1e6:.1f}M, loss {loss.item():.3f}, "
      f"peak mem {torch.cuda.max_memory_allocated()/2**30:.1f} GiB)")
