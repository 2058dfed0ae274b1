#!/usr/bin/env python3
"""The peer of `tally bench io`: decode + ImageNet training augmentation + batching with
PIL and torchvision, as PyTorch's ImageNet example does it, on the same JPEG files.

Per sample: PIL open + convert("RGB"), RandomResizedCrop(224) (area 0.08-1, aspect 3/4-4/3,
bilinear), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4), ToTensor, AlexNet PCA lighting
noise (0.1), Normalize; batches of --batch by the DataLoader's default collate (NCHW fp32).

Threads: 1 runs everything in this process (num_workers=0: no inter-process copies, the
fastest single-core setting); T > 1 uses T DataLoader worker processes, each with one torch
thread, which is how torchvision pipelines are run in practice.

Prints one JSON line: {"threads": T, "images": N, "img_per_s": ..., "torch": ..., ...}.
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

EIGVAL = torch.tensor([55.46, 4.794, 1.148]) / 255.0
EIGVEC = torch.tensor([[-0.5675, 0.7192, 0.4009],
                       [-0.5808, -0.0045, -0.8140],
                       [-0.5836, -0.6948, 0.4203]])


class Lighting:
    """AlexNet-style PCA lighting noise on a CHW tensor in [0, 1]."""

    def __init__(self, std):
        self.std = std

    def __call__(self, img):
        alpha = torch.randn(3) * self.std
        rgb = (EIGVEC * alpha * EIGVAL).sum(dim=1)
        return img + rgb.view(3, 1, 1)


class Files(Dataset):
    def __init__(self, paths, transform):
        self.paths = paths
        self.transform = transform

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            img = Image.open(f).convert("RGB")
        return self.transform(img), i % 1000


def worker_init(_):
    torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup-batches", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    paths = sorted(os.path.join(args.dir, f) for f in os.listdir(args.dir) if f.endswith(".jpg"))
    transform = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ColorJitter(0.4, 0.4, 0.4),
        transforms.ToTensor(),
        Lighting(0.1),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    workers = 0 if args.threads <= 1 else args.threads
    extra = dict(worker_init_fn=worker_init, prefetch_factor=4, persistent_workers=True) if workers else {}
    loader = DataLoader(Files(paths, transform), batch_size=args.batch, shuffle=True, num_workers=workers,
                        drop_last=True, **extra)
    # Warm up (worker start, first file reads), then time whole epochs' worth of batches.
    it = iter(loader)
    for _ in range(args.warmup_batches):
        next(it)
    timed = len(loader) - args.warmup_batches
    start = time.perf_counter()
    for _ in range(timed):
        images, _labels = next(it)
    seconds = time.perf_counter() - start
    n = timed * args.batch
    print(json.dumps({"threads": args.threads, "images": n, "seconds": seconds, "img_per_s": n / seconds,
                      "torch": torch.__version__, "torchvision": torchvision.__version__,
                      "pil": Image.__version__, "shape": list(images.shape)}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
