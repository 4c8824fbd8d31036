#!/usr/bin/python3
"""PyTorch peer of the ZeRO benchmark (bench/zero/run_torch26.sh).

What a PyTorch 2.6 user would write to train tessera-train's ViT-B/16 at 32 px
with each ZeRO stage on CPU ranks: torchvision's VisionTransformer (patch 16,
dim 768, depth 12, heads 12, MLP 3072) with tessera's synthetic dataset's
input (1 channel) and 10 classes, AdamW in fp32 at PyTorch's defaults (the
for-loop implementation on CPU), Gloo on loopback, synthetic data. One mode per
ZeRO stage:

  ddp           stage 0: DistributedDataParallel, the whole AdamW state per rank
  zero1         stage 1: DDP + torch.distributed.optim.ZeroRedundancyOptimizer
  fsdp-grad-op  stage 2: FSDP ShardingStrategy.SHARD_GRAD_OP
  fsdp-full     stage 3: FSDP ShardingStrategy.FULL_SHARD

Both FSDP modes wrap one FSDP unit per encoder block (and the rest at the
root), so gradients are reduce-scattered block by block and, with FULL_SHARD,
parameters are gathered block by block.

Each rank prints one JSON line: its peak RSS (getrusage(RUSAGE_SELF).ru_maxrss,
the kernel's high-water mark of the process's resident set, as GNU time's %M)
and its mean step time over the steps after the warmup. --tiny shrinks the
model (dim 64, depth 2, heads 4, MLP 128) for a quick end-to-end check.

Run with Debian's /usr/bin/python3 (python3-torch, python3-torchvision); trixie's
PyTorch is built without libuv, so the TCP store needs USE_LIBUV=0.
"""

import argparse
import functools
import json
import math
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel
from torchvision.models.vision_transformer import EncoderBlock, VisionTransformer

# ViT-B/16 (Dosovitskiy et al.), as tessera-train's vit-b16 preset.
VIT_B16 = {"patch_size": 16, "hidden_dim": 768, "num_layers": 12, "num_heads": 12,
           "mlp_dim": 3072}
TINY = {"patch_size": 16, "hidden_dim": 64, "num_layers": 2, "num_heads": 4, "mlp_dim": 128}
MODES = ("ddp", "zero1", "fsdp-grad-op", "fsdp-full")


def build_model(args, shape):
    """torchvision's ViT with tessera's synthetic input channels."""
    model = VisionTransformer(image_size=args.image_size, num_classes=args.classes, **shape)
    if args.channels != 3:
        # torchvision's patch projection takes RGB; initialised as torchvision does.
        patch = shape["patch_size"]
        conv = nn.Conv2d(args.channels, shape["hidden_dim"], patch, stride=patch)
        fan_in = args.channels * patch * patch
        nn.init.trunc_normal_(conv.weight, std=math.sqrt(1.0 / fan_in))
        nn.init.zeros_(conv.bias)
        model.conv_proj = conv
    return model


def wrap(model, args):
    """The model and its optimizer for the mode."""
    adamw = functools.partial(torch.optim.AdamW, lr=args.lr, weight_decay=0.05)
    if args.mode == "ddp":
        ddp = DistributedDataParallel(model)
        return ddp, adamw(ddp.parameters())
    if args.mode == "zero1":
        ddp = DistributedDataParallel(model)
        return ddp, ZeroRedundancyOptimizer(
            ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=args.lr,
            weight_decay=0.05)
    strategy = {"fsdp-grad-op": ShardingStrategy.SHARD_GRAD_OP,
                "fsdp-full": ShardingStrategy.FULL_SHARD}[args.mode]
    fsdp = FullyShardedDataParallel(model, sharding_strategy=strategy,
                                    auto_wrap_policy=ModuleWrapPolicy({EncoderBlock}),
                                    device_id=torch.device("cpu"))
    return fsdp, adamw(fsdp.parameters())


def optimizer_state_bytes(optimizer):
    """The bytes of state this rank's optimizer holds (its shard under ZeRO)."""
    local = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return sum(t.numel() * t.element_size() for state in local.state.values()
               for t in state.values() if torch.is_tensor(t))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True, help="rank 0's TCP store")
    parser.add_argument("--batch-size", type=int, default=2, help="per rank")
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=4, help="timed steps")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    parser.add_argument("--image-size", type=int, default=32)
    # tessera's synthetic dataset: 1 channel, 10 classes.
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tiny", action="store_true",
                        help="dim 64, depth 2, heads 4, MLP 128: a quick check, not a figure")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # trixie's torch is built without libuv: the store's classic backend.
    store = dist.TCPStore("127.0.0.1", args.port, args.world_size, is_master=args.rank == 0,
                          use_libuv=False)
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world_size)
    shape = TINY if args.tiny else VIT_B16
    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = build_model(args, shape)
    parameters = sum(p.numel() for p in model.parameters())
    wrapped, optimizer = wrap(model, args)

    generator = torch.Generator().manual_seed(args.seed * 1000 + args.rank)
    step_seconds = []
    wrapped.train()
    for step in range(args.warmup_steps + args.steps):
        images = torch.randn(args.batch_size, args.channels, args.image_size, args.image_size,
                             generator=generator)
        labels = torch.randint(0, args.classes, (args.batch_size,), generator=generator)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(wrapped(images), labels)
        loss.backward()
        optimizer.step()
        if step >= args.warmup_steps:
            step_seconds.append(time.perf_counter() - start)
    final_loss = loss.item()
    dist.barrier()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({
        "rank": args.rank,
        "world_size": args.world_size,
        "mode": args.mode,
        "model": "tiny" if args.tiny else "vit-b16",
        "image_size": args.image_size,
        "parameters": parameters,
        "batch_size": args.batch_size,
        "warmup_steps": args.warmup_steps,
        "steps": args.steps,
        "peak_rss_bytes": peak_rss,
        # Counted, for a look at the sharding: parameters this rank holds at
        # rest (FSDP: its shards) and its optimizer state.
        "local_parameter_bytes": sum(p.numel() * p.element_size()
                                     for p in wrapped.parameters()),
        "optimizer_state_bytes": optimizer_state_bytes(optimizer),
        "step_ms": 1000.0 * sum(step_seconds) / len(step_seconds) if step_seconds else None,
        "final_loss": final_loss,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }), flush=True)
    # The figures are out; exit without tearing down. With trixie's 2.6, one
    # rank of a zero1 run hung at its end in 5 of 8 runs at --tiny: in
    # destroy_process_group, or in freeing the model and optimizer after it;
    # ddp (9 runs) and fsdp-full (10) did not. Rank 0 hosts the store and
    # leaves last, once every rank has said it is done.
    store.set(f"done/{args.rank}", "1")
    if args.rank == 0:
        store.wait([f"done/{rank}" for rank in range(args.world_size)])
    os._exit(0)


if __name__ == "__main__":
    main()
