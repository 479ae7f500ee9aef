#!/usr/bin/python3
"""torch_ref.py — PyTorch's figures for `make bench` (bench/train.c's models,
bench/qlora.c's step).

    /usr/bin/python3 bench/torch_ref.py [--only train|sizes|qlora|gpu] [--threads 1,2] [--quick] [--qlora-layers N] > FILE

Trains the same models as bench/train.c (train) and bench/train_sizes.c
(sizes: ResNet-18 and GPT-2 at real sizes), with the same shapes,
optimizers and thread counts (torch.set_num_threads, and OpenBLAS's own:
set_threads), on random data, and prints one machine-readable line per
figure, read by kiln_bench --torch FILE:

    ref train_<model>_<N>t <value>     steps/s (mlp, cnn, sizes) or tokens/s (gpt)
    ref rss_<model>_<N>t <value>       peak RSS in MiB (sizes)
    ref qlora_<L>l_<N>t <value>        tokens/s of bench/qlora.c's step (N: the larger count)
    ref gpu_gpt_<size>_<mode> <value>  tokens/s of bench/gpu_lines.c's GPT-2 steps on the GPU
                                       (size small or large; mode fp32, tf32 or bf16 autocast),
                                       when torch has CUDA
    note <text>                        why there are no figures

Each sizes line runs in a process of its own (this script again, with
--size-line), its peak RSS the child's ru_maxrss (the interpreter and torch
included, as a PyTorch user's process has them), timed as kiln's: one
warm-up step, then 3 steps, the median.

Timing as kiln's bench: one warm-up step, then steps until a time budget is
spent (at least 3), median seconds per step. Without PyTorch it prints only
a note and exits 0. Attention is written out (q k^T, causal mask, softmax,
@ v): torch 1.13 has no fused scaled_dot_product_attention; on the GPU,
torch 2's is used where it exists (what a PyTorch user runs there).
"""
import ctypes
import math
import os
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the bench prints kiln's figures alone
    print(f"note PyTorch is not importable ({e}): no PyTorch ratios")
    sys.exit(0)

def set_threads(nt):
    """torch.set_num_threads, and the same for the BLAS behind torch's
    products: Debian's torch calls the system's OpenBLAS, whose own thread
    pool torch.set_num_threads does not reach (at "1 thread" its products
    ran on every core)."""
    torch.set_num_threads(nt)
    for lib in sorted({line.split()[-1] for line in open("/proc/self/maps") if "blas" in line.rsplit("/", 1)[-1]}):
        try:
            ctypes.CDLL(lib).openblas_set_num_threads(nt)
        except (OSError, AttributeError):  # not OpenBLAS
            pass


V, T, L, D, H, B_GPT = 256, 128, 4, 256, 4, 16
SIZE_STEPS = 3
# name: (kind, batch, width) as bench/train_sizes.c's lines
SIZE_LINES = {"resnet18_b32": ("resnet", 32, 0), "resnet18_b128": ("resnet", 128, 0),
              "gpt512": ("gpt", 8, 512), "gpt768": ("gpt", 8, 768)}
GPT2_LAYERS, GPT2_CONTEXT = 6, 256


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2, self.fc = nn.Conv2d(1, 16, 3), nn.Conv2d(16, 32, 3), nn.Linear(800, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


class Block(nn.Module):
    """Pre-layernorm attention and MLP; gelu "none" (erf) or "tanh"."""

    def __init__(self, d=D, h=H, t=T, gelu="none"):
        super().__init__()
        self.h, self.gelu = h, gelu
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.ones(t, t, dtype=torch.bool).triu(1))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).view(b, t, 3 * self.h, d // self.h).transpose(1, 2).split(self.h, dim=1)
        if x.is_cuda and hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d // self.h))
            a = torch.softmax(s.masked_fill(self.mask, float("-inf")), -1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class GPT(nn.Module):
    """Pre-layernorm, learned positions, untied head without bias."""

    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)
        self.register_buffer("pos", torch.arange(T))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(self.pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.lnf(x))


class LoraLinear(nn.Module):
    """A frozen f32 weight (the dequantized 4-bit one) plus alpha/r B A."""

    def __init__(self, inp, out, r=8, alpha=16):
        super().__init__()
        self.w = nn.Parameter(torch.randn(out, inp) * 0.02, requires_grad=False)
        self.a = nn.Parameter(torch.empty(r, inp).uniform_(-1 / math.sqrt(inp), 1 / math.sqrt(inp)))
        self.b = nn.Parameter(torch.randn(out, r) * 0.01)
        self.s = alpha / r

    def forward(self, x):
        return F.linear(x, self.w) + self.s * F.linear(F.linear(x, self.a), self.b)


def frozen(inp, out):
    return nn.Parameter(torch.randn(out, inp) * 0.02, requires_grad=False)


class LlamaBlock(nn.Module):
    """TinyLlama's block (Meta's interleaved rope) with adapters on q, k, v, o."""

    def __init__(self, d=2048, h=32, kv=4, hidden=5632, seq=512):
        super().__init__()
        self.h, self.kv, self.hd = h, kv, d // h
        self.q, self.k = LoraLinear(d, d), LoraLinear(d, kv * self.hd)
        self.v, self.o = LoraLinear(d, kv * self.hd), LoraLinear(d, d)
        self.w1, self.w2, self.w3 = frozen(d, hidden), frozen(hidden, d), frozen(d, hidden)
        self.n1 = nn.Parameter(torch.ones(d), requires_grad=False)
        self.n2 = nn.Parameter(torch.ones(d), requires_grad=False)
        ang = torch.arange(seq)[:, None] * 10000.0 ** (-torch.arange(0, self.hd, 2) / self.hd)
        self.register_buffer("cos", ang.cos()[None, :, None, :])
        self.register_buffer("sin", ang.sin()[None, :, None, :])
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1))

    def rope(self, x):
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * self.cos - b * self.sin, a * self.sin + b * self.cos), -1).flatten(-2)

    def forward(self, x):
        b, t, d = x.shape
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.n1
        q = self.rope(self.q(y).view(b, t, self.h, self.hd)).transpose(1, 2)
        k = self.rope(self.k(y).view(b, t, self.kv, self.hd)).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        k, v = k.repeat_interleave(self.h // self.kv, 1), v.repeat_interleave(self.h // self.kv, 1)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
        a = (torch.softmax(s.masked_fill(self.mask, float("-inf")), -1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(a)
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.n2
        return x + F.linear(F.silu(F.linear(y, self.w1)) * F.linear(y, self.w3), self.w2)


def setup_qlora(layers, seq=512, vocab=32000, d=2048):
    """bench/qlora.c's step in f32: no checkpointing (it would only add a forward)."""
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(vocab, d) * 0.02
    blocks = nn.ModuleList(LlamaBlock(seq=seq) for _ in range(layers))
    norm, head = torch.ones(d), torch.randn(vocab, d) * 0.02
    params = [p for p in blocks.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    x, y = torch.randint(0, vocab, (1, seq), generator=g), torch.randint(0, vocab, (1, seq), generator=g)

    def step():
        opt.zero_grad(set_to_none=False)
        h = emb[x]
        for blk in blocks:
            h = blk(h)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * norm
        F.cross_entropy(F.linear(h, head).reshape(-1, vocab), y.reshape(-1)).backward()
        opt.step()

    return step


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """models/resnet.h's resnet18_cifar: 3x3 stem of stride 1, no max-pool."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for i, w in enumerate((64, 128, 256, 512)):
            for b in range(2):
                blocks.append(BasicBlock(cin, w, 2 if i > 0 and b == 0 else 1))
                cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class GPT2(nn.Module):
    """models/gpt.h's GPT-2: learned positions, head tied to wte."""

    def __init__(self, d, layers, t):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(Block(d, d // 64, t, "tanh") for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("pos", torch.arange(t))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(self.pos)
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def setup(name):
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        model, x, y = MLP(), torch.rand(128, 784, generator=g), torch.randint(0, 10, (128,), generator=g)
    elif name == "cnn":
        model, x, y = CNN(), torch.rand(128, 1, 28, 28, generator=g), torch.randint(0, 10, (128,), generator=g)
    elif name == "gpt":
        model = GPT()
        x, y = torch.randint(0, V, (B_GPT, T), generator=g), torch.randint(0, V, (B_GPT, T), generator=g)
    elif SIZE_LINES[name][0] == "resnet":
        n = SIZE_LINES[name][1]
        model, x, y = ResNet18(), torch.rand(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    else:
        n, d = SIZE_LINES[name][1:]
        model = GPT2(d, GPT2_LAYERS, GPT2_CONTEXT)
        x = torch.randint(0, V, (n, GPT2_CONTEXT), generator=g)
        y = torch.randint(0, V, (n, GPT2_CONTEXT), generator=g)
    if name in SIZE_LINES and SIZE_LINES[name][0] == "resnet":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    elif name != "mlp" and name != "cnn":
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=False)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        opt.step()

    return step


def measure(step, budget_s, min_reps=3, max_reps=200):
    step()
    times, start = [], time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def size_line(name, nt):
    """The child: one sizes line; prints its median seconds a step."""
    set_threads(nt)
    step = setup(name)
    times = []
    for _ in range(SIZE_STEPS + 1):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(statistics.median(times[1:]), flush=True)


def sizes(threads):
    for name in SIZE_LINES:
        for nt in threads:
            child = subprocess.Popen([sys.executable, __file__, "--size-line", name, str(nt)], stdout=subprocess.PIPE)
            out = child.stdout.read()
            _, status, ru = os.wait4(child.pid, 0)
            if status != 0:
                print(f"note torch_ref.py --size-line {name} {nt} failed", flush=True)
                continue
            print(f"ref train_{name}_{nt}t {1.0 / float(out):.6g}", flush=True)
            print(f"ref rss_{name}_{nt}t {ru.ru_maxrss / 1024.0:.6g}", flush=True)


# size: (layers, width, context, batch) as bench/gpu_lines.c's
GPU_SIZES = {"small": (4, 256, 128, 16), "large": (12, 768, 512, 8)}


def gpu(scale):
    """bench/gpu_lines.c's GPT-2 steps on the GPU in each precision mode."""
    if not torch.cuda.is_available():
        print(f"note torch {torch.__version__} has no CUDA device: no PyTorch GPU ratios", flush=True)
        return
    print(f"# torch gpu: {torch.cuda.get_device_name()}", file=sys.stderr)
    for size, (layers, d, t, b) in GPU_SIZES.items():
        for mode in ("fp32", "tf32", "bf16"):
            torch.manual_seed(0)
            model = GPT2(d, layers, t).cuda()
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
            x = torch.randint(0, V, (b, t), device="cuda")
            y = torch.randint(0, V, (b, t), device="cuda")
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            torch.backends.cudnn.allow_tf32 = mode == "tf32"

            def step():
                opt.zero_grad(set_to_none=False)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                    logits = model(x)
                F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1)).backward()
                opt.step()
                torch.cuda.synchronize()

            print(f"ref gpu_gpt_{size}_{mode} {b * t / measure(step, 2.0 * scale, 3, 50):.6g}", flush=True)
            del model, opt
            torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False


def main():
    threads, scale, only, layers = [1, 2], 1.0, None, 2
    args = sys.argv[1:]
    if args[:1] == ["--size-line"]:
        size_line(args[1], int(args[2]))
        return
    if "--only" in args:
        only = args[args.index("--only") + 1]
    if "--qlora-layers" in args:
        layers = int(args[args.index("--qlora-layers") + 1])
    if "--threads" in args:
        threads = [int(v) for v in args[args.index("--threads") + 1].split(",")]
    if "--quick" in args:
        scale = 0.25
    print(f"note torch {torch.__version__}", flush=True)
    if only in (None, "train"):
        for name, per_step, budget in (("mlp", 1, 2.0), ("cnn", 1, 3.0), ("gpt", B_GPT * T, 6.0)):
            step = setup(name)
            for nt in threads:
                set_threads(nt)
                print(f"ref train_{name}_{nt}t {per_step / measure(step, budget * scale):.6g}", flush=True)
    if only in (None, "sizes"):
        sizes(threads)
    if only in (None, "gpu"):
        gpu(scale)
    if only in (None, "qlora"):
        set_threads(threads[-1])
        step = setup_qlora(layers)
        print(f"ref qlora_{layers}l_{threads[-1]}t {512 / measure(step, 20.0 * scale, 2, 10):.6g}", flush=True)
        cpu = time.process_time()
        step()  # one step more in CPU seconds, as bench/qlora.c prints it
        print(f"# torch qlora: {layers} layers, {time.process_time() - cpu:.2f} CPU s a step", file=sys.stderr)


if __name__ == "__main__":
    main()
