#!/usr/bin/python3
"""PyTorch DDP peer of the tessera-train throughput benchmark (run.sh).

The same Vision Transformer as worker/trainer/model/vit.cc, op for op: patch
convolution, class token, position embedding, pre-norm encoder blocks
(LayerNorm, multi-head self-attention via baddbmm with the 1/sqrt(head_dim)
scale as its alpha, softmax, bmm; LayerNorm, GELU MLP), final LayerNorm, linear
head on the class token; the same initialisation (Xavier-uniform linears with
zero biases, fan-in normal patch projection, zero head, 0.02 normal position
embedding). Trained with DistributedDataParallel at its defaults (Gloo,
bucket_cap_mb=25) and AdamW in the same two parameter groups under the same
warmup + cosine schedule, on synthetic uint8 images of tessera's synthetic
dataset's size, gathered, scaled, normalised (and resized to the model's input
size when it differs) per batch the way tessera's BatchLoader does.

Prints one JSON line per rank: images/s over the timed steps (per rank) and the
mean step time. Run with Debian's /usr/bin/python3 (python3-torch).

The defaults mirror tessera's model op for op (run.sh, PyTorch 1.13). With
--attention sdpa --fused-adamw it is instead the peer a PyTorch 2.x user would
write (run_torch26.sh): attention through F.scaled_dot_product_attention and
AdamW(fused=True), or AdamW(foreach=True) where this PyTorch has no fused
kernel for the device; the JSON line says which ran.
"""

import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

# name: (image_size, patch_size, dim, depth, heads, mlp_dim), as vit_config.cc.
PRESETS = {
    "vit-micro": (28, 4, 64, 4, 4, 128),
    "vit-cifar-tiny": (32, 4, 192, 6, 3, 384),
    "vit-cifar-small": (32, 4, 256, 7, 4, 512),
}


def make_linear(fan_in, fan_out):
    linear = nn.Linear(fan_in, fan_out)
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


class SelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout, sdpa=False):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(dim // heads)
        self.qkv = make_linear(dim, 3 * dim)
        self.proj = make_linear(dim, dim)
        self.attn_dropout = nn.Dropout(dropout)
        self.sdpa = sdpa

    def forward(self, x):
        batch, tokens, dim = x.shape
        heads, head_dim = self.heads, dim // self.heads
        qkv = self.qkv(x).reshape(batch, tokens, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            q, k, v = qkv.unbind(0)
            context = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.attn_dropout.p if self.training else 0.0)
            return self.proj(context.transpose(1, 2).reshape(batch, tokens, dim))
        q = qkv[0].reshape(batch * heads, tokens, head_dim)
        k = qkv[1].reshape(batch * heads, tokens, head_dim)
        v = qkv[2].reshape(batch * heads, tokens, head_dim)
        scores = torch.baddbmm(
            torch.empty(1, 1, 1), q, k.transpose(1, 2), beta=0.0, alpha=self.scale)
        attention = self.attn_dropout(scores.softmax(-1))
        context = torch.bmm(attention, v).view(batch, heads, tokens, head_dim)
        return self.proj(context.transpose(1, 2).reshape(batch, tokens, dim))


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, mlp_dim, dropout, eps, sdpa=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attention = SelfAttention(dim, heads, dropout, sdpa)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.fc1 = make_linear(dim, mlp_dim)
        self.fc2 = make_linear(mlp_dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        y = x + self.dropout(self.attention(self.norm1(x)))
        hidden = F.gelu(self.fc1(self.norm2(y)))
        hidden = self.fc2(self.dropout(hidden))
        return y + self.dropout(hidden)


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch, channels, classes, dim, depth, heads, mlp_dim,
                 dropout=0.0, eps=1e-6, sdpa=False):
        super().__init__()
        patches = (image_size // patch) ** 2
        self.patch_embedding = nn.Conv2d(channels, dim, patch, stride=patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.position_embedding = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[EncoderBlock(dim, heads, mlp_dim, dropout, eps, sdpa) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.head = nn.Linear(dim, classes)
        with torch.no_grad():
            fan_in = channels * patch * patch
            nn.init.normal_(self.patch_embedding.weight, 0.0, math.sqrt(1.0 / fan_in))
            nn.init.zeros_(self.patch_embedding.bias)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def forward(self, images):
        batch = images.shape[0]
        x = self.patch_embedding(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(batch, -1, -1), x], 1) + self.position_embedding
        x = self.dropout(x)
        x = self.blocks(x)
        x = self.norm(x)
        return self.head(x[:, 0])


def scheduled_lr(peak, step, total, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(max((step - warmup) / max(1, total - warmup), 0.0), 1.0)
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="vit-micro", choices=sorted(PRESETS))
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=20, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--train-size", type=int, default=20000)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    # tessera's synthetic dataset: 1 channel, 28 x 28, 10 classes.
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--data-size", type=int, default=28)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--attention", choices=("baddbmm", "sdpa"), default="baddbmm",
                        help="baddbmm: tessera's ops; sdpa: F.scaled_dot_product_attention")
    parser.add_argument("--fused-adamw", action="store_true",
                        help="AdamW(fused=True), else foreach=True where unsupported")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world_size)
    image_size, patch, dim, depth, heads, mlp_dim = PRESETS[args.model]
    torch.manual_seed(args.seed)
    model = VisionTransformer(image_size, patch, args.channels, args.classes, dim, depth,
                              heads, mlp_dim, sdpa=args.attention == "sdpa")
    ddp = DistributedDataParallel(model)  # defaults: bucket_cap_mb=25, broadcast

    decayed, not_decayed = [], []
    for name, p in model.named_parameters():
        token = name in ("class_token", "position_embedding")
        (not_decayed if p.dim() <= 1 or token else decayed).append(p)
    groups = [{"params": decayed, "weight_decay": 0.05},
              {"params": not_decayed, "weight_decay": 0.0}]
    adamw = "for-loop"
    if args.fused_adamw:
        try:
            optimizer = torch.optim.AdamW(groups, lr=args.lr, fused=True)
            adamw = "fused"
        except (RuntimeError, TypeError):  # no fused kernel for this device here
            optimizer = torch.optim.AdamW(groups, lr=args.lr, foreach=True)
            adamw = "foreach"
    else:
        optimizer = torch.optim.AdamW(groups, lr=args.lr)

    generator = torch.Generator().manual_seed(args.seed)
    pixels = torch.randint(0, 256, (args.train_size, args.channels, args.data_size,
                                    args.data_size), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, args.classes, (args.train_size,), generator=generator)
    mean = torch.full((1, args.channels, 1, 1), 0.5)
    inv_std = torch.full((1, args.channels, 1, 1), 1.0 / 0.25)
    shard = torch.randperm(args.train_size, generator=generator)
    shard = shard[:args.train_size - args.train_size % args.world_size]
    shard = shard[args.rank::args.world_size]
    batches_per_epoch = shard.numel() // args.batch_size

    total = args.warmup_steps + args.steps
    warmup_lr = math.ceil(0.05 * total)
    step_seconds = 0.0
    loss_sum = torch.zeros(())
    ddp.train()
    for step in range(total):
        start = time.perf_counter()
        b = step % batches_per_epoch
        index = shard[b * args.batch_size:(b + 1) * args.batch_size]
        images = pixels.index_select(0, index).to(torch.float32).div_(255.0)
        images.sub_(mean).mul_(inv_std)
        if args.data_size != image_size:
            images = F.interpolate(images, size=(image_size, image_size), mode="bilinear",
                                   align_corners=False)
        targets = labels.index_select(0, index)
        optimizer.zero_grad()
        loss = F.cross_entropy(ddp(images), targets)
        loss.backward()
        for group in optimizer.param_groups:
            group["lr"] = scheduled_lr(args.lr, step, total, warmup_lr)
        optimizer.step()
        loss_sum += loss.detach()
        if step >= args.warmup_steps:
            step_seconds += time.perf_counter() - start
    final_loss = loss_sum.item() / total
    dist.barrier()
    print(json.dumps({
        "rank": args.rank,
        "world_size": args.world_size,
        "model": args.model,
        "parameters": sum(p.numel() for p in model.parameters()),
        "images_per_sec": args.steps * args.batch_size / step_seconds,
        "step_ms": 1000.0 * step_seconds / args.steps,
        "mean_loss": final_loss,
        "torch": torch.__version__,
        "attention": args.attention,
        "adamw": adamw,
    }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
