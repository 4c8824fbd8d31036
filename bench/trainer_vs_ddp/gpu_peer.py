#!/usr/bin/env python3
"""PyTorch peer of scripts/gpu_check.sh's ViT-B/16 figure, on one GPU.

Trains ViT-B/16 the way a PyTorch 2.x user would write it: torchvision's
models.vit_b_16 (attention through nn.MultiheadAttention, which calls
F.scaled_dot_product_attention when no weights are asked for, as torchvision
does) or timm's vit_base_patch16_224 (F.scaled_dot_product_attention directly),
randomly initialised; eager by default, or under torch.compile with --compile;
bf16 autocast, AdamW(fused=True), cross-entropy, cudnn.benchmark on. Batch 128
at 224 px by default, from one fixed batch of random images already on the GPU,
so unlike tessera-train's figure no input pipeline is timed. 10 classes, as
tessera's synthetic dataset (the head is 0.01% of the FLOPs).

Prints one JSON line: the model, whether compiled, images/s over the timed
steps (wall clock between two synchronisations) and the mean step time.

With --profile-steps A-B --profile-dir DIR, steps A to B (counted from 1,
warm-up included) run under torch.profiler and are written to DIR as
tessera-train writes its own (bench/step_profile/torch_window.py), for
bench/step_profile/compare.py.
"""

import argparse
import json
import sys
import time

import os

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "step_profile"))
import torch_window  # noqa: E402


def build_model(name, num_classes, image_size):
    if name == "torchvision":
        import torchvision

        return torchvision.models.vit_b_16(num_classes=num_classes, image_size=image_size)
    if name == "timm":
        import timm

        return timm.create_model("vit_base_patch16_224", pretrained=False,
                                 num_classes=num_classes, img_size=image_size)
    raise ValueError(f"unknown model {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["torchvision", "timm"], default="torchvision")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--profile-steps", default="", help="A-B: profile these steps")
    parser.add_argument("--profile-dir", default="", help="where the profile goes")
    args = parser.parse_args()
    window = None
    if args.profile_steps:
        if not args.profile_dir:
            sys.exit("gpu_peer: --profile-steps needs --profile-dir")
        window = torch_window.StepWindow(torch_window.parse_steps(args.profile_steps),
                                         args.profile_dir, cuda=True)

    if not torch.cuda.is_available():
        sys.exit("gpu_peer: torch sees no CUDA device")
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)

    model = build_model(args.model, args.num_classes, args.image_size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=True)
    forward = torch.compile(model) if args.compile else model
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(forward(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if window is not None:
        for n in range(1, window.last + 1):
            window.before_step(n)
            step()
            window.after_step(n)
        print(json.dumps({"model": args.model, "compile": args.compile,
                          "profile_steps": args.profile_steps,
                          "profile_dir": args.profile_dir}), flush=True)
        return
    started = time.perf_counter()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    print(json.dumps({
        "model": args.model,
        "compile": args.compile,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "images_per_s": round(args.batch_size * args.steps / elapsed, 1),
        "step_ms": round(1000 * elapsed / args.steps, 2),
        "warmup_s": round(warm_s, 1),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
    }), flush=True)


if __name__ == "__main__":
    main()
