#!/usr/bin/python3
"""The CPU peer of tessera-train's step profile (scripts/profile_compare.sh).

torchvision's VisionTransformer of the shape of a tessera preset (patch
convolution over one input channel, as tessera's synthetic and Fashion-MNIST
data have), trained as a PyTorch user writes it: fp32, cross-entropy, AdamW,
zero_grad(set_to_none=True), on one fixed batch. Steps A to B run under
torch.profiler and are written as torch_window.py writes them. Run with
Debian's /usr/bin/python3 (python3-torch, python3-torchvision).
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_window  # noqa: E402

# name: (image_size, patch_size, dim, depth, heads, mlp_dim), as vit_config.cc.
PRESETS = {
    "vit-micro": (28, 4, 64, 4, 4, 128),
    "vit-ti16": (224, 16, 192, 12, 3, 768),
    "vit-cifar-tiny": (32, 4, 192, 6, 3, 384),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(PRESETS), default="vit-micro")
    parser.add_argument("--image-size", type=int, default=0, help="0: the preset's")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile-steps", default="3-5")
    parser.add_argument("--profile-dir", required=True)
    args = parser.parse_args()

    from torchvision.models.vision_transformer import VisionTransformer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    image, patch, dim, depth, heads, mlp = PRESETS[args.model]
    image = args.image_size or image
    model = VisionTransformer(image, patch, depth, heads, dim, mlp,
                              num_classes=args.num_classes)
    model.conv_proj = torch.nn.Conv2d(1, dim, kernel_size=patch, stride=patch)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    images = torch.randn(args.batch_size, 1, image, image)
    labels = torch.randint(0, args.num_classes, (args.batch_size,))

    window = torch_window.StepWindow(torch_window.parse_steps(args.profile_steps),
                                     args.profile_dir, cuda=False)
    for step in range(1, window.last + 1):
        window.before_step(step)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        window.after_step(step)
    print(f"cpu_peer: torchvision VisionTransformer ({args.model} shape, {image} px), torch "
          f"{torch.__version__}: steps {args.profile_steps} in {args.profile_dir}")


if __name__ == "__main__":
    main()
