#!/usr/bin/env python3
"""Same weights, same batch, same loss: tessera-train against timm (or
torchvision) on one fixed batch, step by step.

A fast step proves nothing unless it computes the same thing. This makes a
randomly initialised timm vit_base_patch16_224 (or torchvision's vit_b_16),
writes its weights as safetensors with its own names, and writes a fixed
batch of random RGB images at the model's size as PNGs in an image folder
(labels by class folder). tessera-train then trains ViT-B/16 from those
weights (--init-from, --init-names timm|torchvision) on that folder, the whole
folder being one batch, no augmentation, the image used as it is (crop
fraction 1); the PyTorch model trains on the same pixels with the same
normalisation, AdamW (no weight decay), the same learning-rate schedule (cosine
from the peak, no warm-up) and the same precision. The losses of every step
must agree within --tolerance (relative); the script prints both columns and
`FIGURE loss_agreement_max_relative_diff=...`, and exits 1 when they do not.

  loss_agreement.py --train build/bin/tessera-train --model timm --device cuda \
      --precision bf16 --batch 128 --steps 20 --workdir /tmp/agreement

On a CPU (a rehearsal: Debian's /usr/bin/python3 has torch and torchvision but
not timm): --model torchvision --device cpu --precision fp32 --batch 10 --steps 3
--image-size 64.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CLASSES = 10


def build_model(name, image_size):
    if name == "timm":
        import timm

        return timm.create_model("vit_base_patch16_224", pretrained=False,
                                 num_classes=CLASSES, img_size=image_size)
    import torchvision

    return torchvision.models.vit_b_16(num_classes=CLASSES, image_size=image_size)


def write_safetensors(path, state):
    """The safetensors layout: an 8-byte header length, a JSON header, the data."""
    header, blobs, offset = {}, [], 0
    for name, tensor in state.items():
        data = tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def write_images(root, count, size):
    """`count` random RGB images under root/train/classK (label K = i % 10), one
    per class under root/val; returns the train pixels [N, H, W, 3] and labels."""
    from PIL import Image

    generator = torch.Generator().manual_seed(1)
    pixels = torch.randint(0, 256, (count, size, size, 3), dtype=torch.uint8,
                           generator=generator)
    labels = torch.arange(count) % CLASSES
    for split, n in (("train", count), ("val", CLASSES)):
        for i in range(n):
            folder = os.path.join(root, split, f"class{i % CLASSES:02d}")
            os.makedirs(folder, exist_ok=True)
            Image.fromarray(pixels[i % count].numpy()).save(
                os.path.join(folder, f"img{i:05d}.png"))
    return pixels, labels


def tessera_losses(args, data, weights):
    metrics = os.path.join(args.workdir, "tessera.jsonl")
    command = [
        args.train, "--model", "vit-b16", "--dataset", "imagefolder", "--data-dir", data,
        "--image-size", str(args.image_size), "--batch-size", str(args.batch),
        "--max-steps", str(args.steps), "--epochs", str(args.steps),
        "--metrics-every", "1", "--warmup-steps", "0",
        "--weight-decay", "0", "--lr", str(args.lr), "--augment=false",
        "--crop-fraction", "1", "--precision", args.precision, "--device", args.device,
        "--init-from", weights, "--init-names", args.model, "--metrics-file", metrics,
        "--data-workers", "2", "--seed", "3"]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"loss_agreement: tessera-train failed ({run.returncode}):\n"
                 f"{run.stdout[-2000:]}{run.stderr[-2000:]}")
    losses = {}
    for line in open(metrics):
        point = json.loads(line)
        if point["name"] == "loss":
            losses[point["step"]] = point["value"]
    return [losses[step] for step in range(1, args.steps + 1)]


def torch_losses(args, model, pixels, labels):
    device = torch.device(args.device)
    model = model.to(device).train()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    images = (pixels.to(device).permute(0, 3, 1, 2).float() / 255 - mean) / std
    labels = labels.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses = []
    for step in range(args.steps):
        # tessera-train's schedule without warm-up: cosine from the peak to 0.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        with torch.autocast(device.type, dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="the tessera-train binary")
    parser.add_argument("--model", choices=["timm", "torchvision"], default="timm")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--batch", type=int, default=128, help="images: one fixed batch")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    if args.batch < CLASSES:
        sys.exit(f"loss_agreement: --batch must hold every one of the {CLASSES} classes")

    os.makedirs(args.workdir, exist_ok=True)
    torch.manual_seed(0)
    model = build_model(args.model, args.image_size)
    # Both libraries start the head at zero, which would leave the first step's
    # loss at ln(10) and the backbone without a gradient: a random head makes
    # every step depend on every weight.
    head = model.head if args.model == "timm" else model.heads.head
    with torch.no_grad():
        torch.nn.init.normal_(head.weight, std=0.02)
    weights = os.path.join(args.workdir, f"{args.model}-init.safetensors")
    write_safetensors(weights, model.state_dict())
    data = os.path.join(args.workdir, "batch")
    pixels, labels = write_images(data, args.batch, args.image_size)
    theirs = torch_losses(args, model, pixels, labels)
    ours = tessera_losses(args, data, weights)

    print(f"step  tessera-train  {args.model:>12}  relative difference "
          f"({args.precision}, {args.batch} images, {args.device})")
    worst = 0.0
    for step, (a, b) in enumerate(zip(ours, theirs), start=1):
        diff = abs(a - b) / max(abs(b), 1e-12)
        worst = max(worst, diff)
        print(f"{step:4d}  {a:13.6f}  {b:12.6f}  {diff:.2e}")
    print(f"FIGURE loss_agreement_max_relative_diff={worst:.3e}")
    if worst > args.tolerance:
        sys.exit(f"loss_agreement: the losses differ by up to {worst:.2%} "
                 f"(tolerance {args.tolerance:.0%})")
    print(f"loss_agreement: every step within {args.tolerance:.0%}")


if __name__ == "__main__":
    main()
