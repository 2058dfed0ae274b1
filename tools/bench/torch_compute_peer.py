#!/usr/bin/env python3
"""The peer of `tally bench compute`: the same training step in PyTorch.

Times forward + cross-entropy + backward + SGD(momentum) step of torchvision's resnet50 (or
the CIFAR ResNet of tools/torch_cifar_resnet.py) and prints one JSON line per memory
layout: {"layout": "nchw"|"channels_last", "img_per_s": ..., "step_s": ...}. On the CPU in
fp32; with --device cuda and --amp float16|bfloat16 on the GPU in automatic mixed precision
(autocast, and a GradScaler for float16), synchronising before each clock reading. Run it
with a Python that has torch and torchvision; `tally bench compute` runs it for you.
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
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--amp", default="", help="float16 or bfloat16: autocast on the GPU")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    amp = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(a.amp)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for layout in a.layouts.split(","):
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        model = build(a.model, a.classes).to(dev).to(memory_format=fmt).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None
        x = torch.randn(a.batch, 3, a.image, a.image, device=dev).to(memory_format=fmt)
        y = torch.randint(0, a.classes, (a.batch,), device=dev)
        loss_fn = torch.nn.CrossEntropyLoss()
        times = []
        for i in range(a.warmup + a.steps):
            sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            if amp is not None:
                with torch.autocast(device_type=dev.type, dtype=amp):
                    loss = loss_fn(model(x), y)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                else:
                    loss.backward()
                    opt.step()
            else:
                loss_fn(model(x), y).backward()
                opt.step()
            sync()
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
        step = statistics.median(times)
        out = {"layout": layout, "img_per_s": a.batch / step, "step_s": step,
               "torch": torch.__version__}
        if dev.type == "cuda":
            out["gpu"] = torch.cuda.get_device_name(dev)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
