"""torchvision's side of bench/input_pipeline: one epoch of ImageFolder +
DataLoader with RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor
(uint8 batches), `workers` loader processes, one torch thread each. Prints
images/s and images per CPU-second (the main process and the loader
processes together, read from /proc), timed from the first batch to the last
(worker start-up excluded, as on tessera's side).

usage: torchvision_loader.py DIR WORKERS [BATCH]
"""
import os
import sys
import time

import torch
import torchvision
from torchvision import datasets, transforms


def cpu_seconds(pids):
    """CPU time of this process and the given children (utime + stime)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def main():
    root, workers = sys.argv[1], int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ])
    ds = datasets.ImageFolder(root + "/train", tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True,
                                         num_workers=workers)
    images = 0
    it = iter(loader)
    for b in range(len(loader)):
        x, _ = next(it)
        assert x.dtype == torch.uint8 and x.shape[1:] == (3, 224, 224)
        if b == 0:
            pids = [w.pid for w in it._workers]
            start = time.perf_counter()
            cpu_start = cpu_seconds(pids)
        else:
            images += x.shape[0]
    wall = time.perf_counter() - start
    cpu = cpu_seconds(pids) - cpu_start  # before the workers exit
    print("%.1f %.1f" % (images / wall, images / cpu))


if __name__ == "__main__":
    assert torchvision.__version__.startswith("0.14"), torchvision.__version__
    main()
