#!/usr/bin/env python3
"""The peer of `tally bench compute`: the same training step in PyTorch.

Times forward + cross-entropy + backward + SGD(momentum) step of torchvision's resnet50 (or
the CIFAR ResNet of tools/torch_cifar_resnet.py) and prints one JSON line per memory layout
and mode: {"layout": "nchw"|"channels_last", "mode": ..., "img_per_s": ..., "step_s": ...}.
On the CPU in fp32; with --device cuda and --amp float16|bfloat16 on the GPU in automatic
mixed precision (autocast, and a GradScaler for float16), the input already on the device in
that dtype. Modes (--modes):
  eager                  the model as it is;
  compile                torch.compile of the model in each of --compile-modes (compile
                         time excluded: it is spent in the warm-up steps, and reported);
  cudagraphs             torch.compile(mode="reduce-overhead"): the compiled forward and
                         backward replayed as CUDA graphs (GPU only).
Steps are timed in groups of --group with one wait per group, as Tally's are; the median
group's time per step is reported. A mode this torch lacks, or one that fails, prints a line
with "skipped" or "error" instead, and the others go on. Run it with a Python that has torch
and torchvision; `tally bench compute` runs it for you.
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


def make_step(model, opt, scaler, loss_fn, amp, device_type):
    def step(x, y):
        opt.zero_grad(set_to_none=True)
        if amp is not None:
            with torch.autocast(device_type=device_type, dtype=amp):
                loss = loss_fn(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                return
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return step


def variants(modes, compile_modes, device_type):
    """(name, torch.compile mode or None for eager, why it cannot run or None)."""
    for mode in modes:
        if mode == "eager":
            yield "eager", None, None
        elif mode in ("compile", "cudagraphs"):
            if not hasattr(torch, "compile"):
                yield mode, None, f"torch {torch.__version__} has no torch.compile"
            elif mode == "cudagraphs" and device_type != "cuda":
                yield mode, None, "CUDA graphs need the GPU"
            elif mode == "cudagraphs":
                yield mode, "reduce-overhead", None
            else:
                for cm in compile_modes:
                    yield f"compile-{cm}", cm, None
        else:
            raise SystemExit(f"--modes: unknown mode {mode!r} (eager, compile, cudagraphs)")


def time_variant(a, dev, amp, layout, compile_mode):
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    torch.manual_seed(0)
    model = build(a.model, a.classes).to(dev).to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda") if amp == torch.float16 else None
    run = model if compile_mode is None else torch.compile(model, mode=compile_mode)
    step = make_step(run, opt, scaler, torch.nn.CrossEntropyLoss(), amp, dev.type)
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev)
    x = (x.to(amp) if amp is not None else x).contiguous(memory_format=fmt)
    y = torch.randint(0, a.classes, (a.batch,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(max(a.warmup, 3 if compile_mode else a.warmup)):
        step(x, y)
    sync()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(max(1, a.steps // a.group)):
        sync()
        t0 = time.perf_counter()
        for _ in range(a.group):
            step(x, y)
        sync()
        times.append((time.perf_counter() - t0) / a.group)
    return statistics.median(times), warm_s


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
    ap.add_argument("--modes", default="eager", help="eager, compile, cudagraphs (comma-separated)")
    ap.add_argument("--compile-modes", default="default",
                    help="torch.compile modes for --modes compile, e.g. default,max-autotune-no-cudagraphs")
    ap.add_argument("--group", type=int, default=1, help="steps per wait (default 1)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    amp = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(a.amp)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    for layout in a.layouts.split(","):
        for name, compile_mode, skipped in variants(a.modes.split(","), a.compile_modes.split(","), dev.type):
            out = {"layout": layout, "mode": name, "torch": torch.__version__}
            if dev.type == "cuda":
                out["gpu"] = torch.cuda.get_device_name(dev)
            if skipped:
                out["skipped"] = skipped
            else:
                try:
                    step, warm_s = time_variant(a, dev, amp, layout, compile_mode)
                    out.update(img_per_s=a.batch / step, step_s=step)
                    if compile_mode is not None:
                        out["compile_s"] = warm_s  # the warm-up steps, compiling included
                except Exception as e:  # one mode failing leaves the others' figures
                    out["error"] = f"{type(e).__name__}: {e}"[:300]
            print(json.dumps(out), flush=True)

if __name__ == "__main__":
    main()
