#!/usr/bin/python3
"""Writes the PyTorch reference fixtures that tests/models/resnet_torch_test.cc checks Tally against.

Run with Debian's interpreter (python3-torch 1.13, python3-torchvision 0.14):

    /usr/bin/python3 tools/make_torch_fixtures.py [--out tests/fixtures]

For each case below the script builds the PyTorch model, fills every parameter, buffer,
the input and the labels from a deterministic formula (no torch RNG; the C++ test
computes the same values), runs one training-mode forward pass, CrossEntropyLoss
(mean over the batch) and backward, and writes one safetensors file holding the
results. Only results are stored, never weights, so the files stay small.

Cases:
  resnet50_zero_gamma   torchvision resnet50(zero_init_residual=True), batch 4x3x112x112,
                        1000 classes; the last BN gamma of every block is 0, as
                        zero_init_residual specifies (most gradients are then exactly 0).
  resnet50_small_gamma  the same network with those gammas small but nonzero, so every
                        gradient tensor is nonzero. float32 is not accurate to 1e-4 here
                        (PyTorch float32 vs float64: up to 8.5e-3), so the stored results
                        are PyTorch's float64 step, with PyTorch float32's own errors.
  resnet20_cifar        CIFAR-style ResNet-20 (6n+2, n=3, tools/torch_cifar_resnet.py),
                        batch 4x3x32x32, 10 classes; last BN gammas as in small_gamma.

The formula (docs/fixtures.md has the full description):
  mix(x)       = splitmix64's finaliser of x + 0x9E3779B97F4A7C15 (64-bit wrap-around)
  u(t, i)      = (mix((t << 40) | i) >> 40) * 2^-23 - 1, uniform in [-1, 1), 24 bits
  t            = the tensor's position in the state_dict (num_batches_tracked skipped),
                 i = the element's flat index in PyTorch's layout ([K, C, R, S], NCHW)
  conv, fc weight     u * sqrt(3 / fan_in), fan_in = C*R*S (in_features for fc)
  fc bias, BN beta    0.1 * u
  BN gamma            1 + 0.1 * u; the last BN of each residual block: 0 (zero_gamma)
                      or 0.05 * |u| + 0.02 (small_gamma)
  BN running_mean     0.1 * u;  running_var  1 + 0.5 * |u|
  input (t = 1000000) u, NCHW;  labels (t = 1000001) mix((t << 40) | n) mod classes
Values are computed in float64 and rounded once to float32.

Stored tensors (all F32 unless said):
  loss [1], logits [N, classes], labels I32 [N]
  grad/<name>          the full gradient, in PyTorch's layout, when numel <= FULL_LIMIT
  grad_norm/<name> [1] and grad_sample/<name> [S] otherwise: the L2 norm and the
                       values at flat indices mix((1 << 63) | (t << 40) | j) mod numel,
                       j = 0 .. S-1 (PyTorch's layout)
  running/<name>       running_mean and running_var after the step
  torch_fp32_error/<name> [1]  float64 cases only: PyTorch float32's relative error against
                       the stored float64 value of loss, logits, each gradient, each running stat
"""

import argparse
import copy
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision
from torchvision.models.resnet import BasicBlock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_cifar_resnet import cifar_resnet  # noqa: E402  the CIFAR ResNet shaped as Tally's

FULL_LIMIT = 16384      # larger gradients are stored as norm + samples
INPUT_ID = 1000000
LABEL_ID = 1000001
U64 = np.uint64


def mix(x):
    """splitmix64 of a uint64 array (wraps modulo 2^64)."""
    with np.errstate(over="ignore"):
        z = x + U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def uniform(tensor_id, n):
    keys = (U64(tensor_id) << U64(40)) | np.arange(n, dtype=np.uint64)
    return (mix(keys) >> U64(40)).astype(np.float64) * 2.0**-23 - 1.0


def sample_indices(tensor_id, numel, count):
    keys = (U64(1) << U64(63)) | (U64(tensor_id) << U64(40)) | np.arange(count, dtype=np.uint64)
    return (mix(keys) % U64(numel)).astype(np.int64)


def formula_value(tensor_id, name, shape, last_bn_gamma, variant):
    n = int(np.prod(shape))
    u = uniform(tensor_id, n)
    if name.endswith("running_mean"):
        v = 0.1 * u
    elif name.endswith("running_var"):
        v = 1.0 + 0.5 * np.abs(u)
    elif name.endswith(".bias"):            # fc bias and BN beta
        v = 0.1 * u
    elif len(shape) == 1:                   # BN gamma
        if name in last_bn_gamma:
            v = np.zeros(n) if variant == "zero_gamma" else 0.05 * np.abs(u) + 0.02
        else:
            v = 1.0 + 0.1 * u
    else:                                   # conv [K, C, R, S] or fc [out, in]
        v = u * np.sqrt(3.0 / (n // shape[0]))
    return v.astype(np.float32).reshape(shape)


def last_bn_gammas(model):
    names = set()
    for mname, m in model.named_modules():
        if isinstance(m, torchvision.models.resnet.Bottleneck):
            names.add(mname + ".bn3.weight")
        elif isinstance(m, BasicBlock):
            names.add(mname + ".bn2.weight")
    return names


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    offset = 0
    blobs = []
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)   # pad so that the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def train_step(model, x, labels):
    """One training-mode forward and backward; returns loss, logits, grads and buffers."""
    logits = model(x)
    loss = nn.CrossEntropyLoss()(logits, torch.from_numpy(labels))
    model.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().double().numpy().copy() for n, p in model.named_parameters()}
    running = {n: b.detach().double().numpy().copy() for n, b in model.named_buffers()
               if n.endswith("running_mean") or n.endswith("running_var")}
    return loss.item(), logits.detach().double().numpy(), grads, running


def relative_error(a, ref):
    norm = np.linalg.norm(ref)
    return float(np.linalg.norm(a - ref) / norm) if norm > 0 else float(np.linalg.norm(a))


def make_fixture(model, model_name, variant, batch, image, classes, samples, reference, out_dir):
    """reference: "fp32" stores PyTorch's float32 results; "fp64" stores float64 results
    (rounded to float32) and, per stored quantity, PyTorch float32's own error against them."""
    model.train()
    last = last_bn_gammas(model)
    entries = [(k, v) for k, v in model.state_dict().items()
               if not k.endswith("num_batches_tracked")]
    ids = {}
    with torch.no_grad():
        for t, (name, tensor) in enumerate(entries):
            ids[name] = t
            tensor.copy_(torch.from_numpy(
                formula_value(t, name, tuple(tensor.shape), last, variant)))
    x = uniform(INPUT_ID, batch * 3 * image * image).astype(np.float32)
    x = torch.from_numpy(x.reshape(batch, 3, image, image))
    keys = (U64(LABEL_ID) << U64(40)) | np.arange(batch, dtype=np.uint64)
    labels = (mix(keys) % U64(classes)).astype(np.int64)

    model64 = copy.deepcopy(model).double() if reference == "fp64" else None
    loss, logits, grads, running = train_step(model, x, labels)
    fp32 = None
    if model64 is not None:
        fp32 = (loss, logits, grads, running)
        loss, logits, grads, running = train_step(model64, x.double(), labels)

    f32 = np.float32
    out = [("loss", np.array([loss], f32)), ("logits", logits.astype(f32)),
           ("labels", labels.astype(np.int32))]
    errors = []
    if fp32 is not None:
        errors.append(("torch_fp32_error/loss", abs(fp32[0] - loss) / abs(loss)))
        errors.append(("torch_fp32_error/logits", relative_error(fp32[1], logits)))
    for name, g in grads.items():
        if g.size <= FULL_LIMIT:
            out.append(("grad/" + name, g.astype(f32)))
            if fp32 is not None:
                errors.append(("torch_fp32_error/" + name, relative_error(fp32[2][name], g)))
        else:
            norm = np.linalg.norm(g)
            idx = sample_indices(ids[name], g.size, samples)
            out.append(("grad_norm/" + name, np.array([norm], f32)))
            out.append(("grad_sample/" + name, g.reshape(-1)[idx].astype(f32)))
            if fp32 is not None:
                mine = fp32[2][name].reshape(-1)
                err = max(abs(np.linalg.norm(mine) - norm) / norm,
                          relative_error(mine[idx], g.reshape(-1)[idx]))
                errors.append(("torch_fp32_error/" + name, err))
    for name, r in running.items():
        out.append(("running/" + name, r.astype(f32)))
        if fp32 is not None:
            errors.append(("torch_fp32_error/" + name, relative_error(fp32[3][name], r)))
    out += [(k, np.array([e], f32)) for k, e in errors]

    path = os.path.join(out_dir, f"{model_name}_{variant}.safetensors")
    meta = {"model": model_name, "variant": variant, "batch": str(batch),
            "image": f"3x{image}x{image}", "classes": str(classes), "reference": reference,
            "torch": torch.__version__, "torchvision": torchvision.__version__}
    write_safetensors(path, out, meta)
    worst = max(errors, key=lambda e: e[1]) if errors else ("", 0.0)
    print(f"{os.path.normpath(path)}: loss {loss:.6f}, {os.path.getsize(path)} bytes" +
          (f", torch fp32 worst error {worst[1]:.2e} in {worst[0]}" if errors else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(2)
    for variant, samples, reference in (("zero_gamma", 1024, "fp32"),
                                        ("small_gamma", 4096, "fp64")):
        model = torchvision.models.resnet50(zero_init_residual=True)
        make_fixture(model, "resnet50", variant, 4, 112, 1000, samples, reference, args.out)
    make_fixture(cifar_resnet(20, 10), "resnet20", "cifar", 4, 32, 10, 4096, "fp32", args.out)


if __name__ == "__main__":
    main()
