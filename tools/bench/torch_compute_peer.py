#!/usr/bin/env python3
"""The peer of `tally bench compute`: the same training step in PyTorch on the CPU.

Times forward + cross-entropy + backward + SGD(momentum) step of torchvision's resnet50 (or
the CIFAR ResNet of tools/torch_cifar_resnet.py) and prints one JSON line per memory
layout: {"layout": "nchw"|"channels_last", "img_per_s": ..., "step_s": ...}. Run it with
Debian's python3 (python3-torch); `tally bench compute` runs it for you.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_cifar_resnet import cifar_resnet  # noqa: E402


def build(name, classes):
    if name.startswith("resnet") and int(name[6:]) in (18, 34, 50, 101, 152):
        return getattr(torchvision.models, name)(num_classes=classes)
    return cifar_resnet(int(name[6:]), classes)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--layouts", default="nchw,channels_last")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    for layout in a.layouts.split(","):
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        model = build(a.model, a.classes).to(memory_format=fmt).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        x = torch.randn(a.batch, 3, a.image, a.image).to(memory_format=fmt)
        y = torch.randint(0, a.classes, (a.batch,))
        loss_fn = torch.nn.CrossEntropyLoss()
        times = []
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
        step = statistics.median(times)
        print(json.dumps({"layout": layout, "img_per_s": a.batch / step, "step_s": step,
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
