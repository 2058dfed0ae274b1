"""The checks tests/tools/onnx_export_test.py runs inside tests/compat_venv.py's environment,
where onnx (and perhaps onnxruntime) can be imported:

    python onnx_venv_checks.py check MODEL.onnx OPSET
    python onnx_venv_checks.py images REFERENCE.safetensors IMAGES.nd
    python onnx_venv_checks.py run MODEL.onnx REFERENCE.safetensors [TALLY_LOGITS.nd]

`check` runs onnx.checker.check_model(full_check=True), which also infers every shape, and
compares the IR version with the one ONNX released with OPSET. `run` feeds a fixed random
batch to the model in onnxruntime and to a float64 numpy ResNet built from the safetensors
export of the same checkpoint (`tally export --format safetensors`, NCHW weights), and
prints the largest difference; given the logits `tally predict` computed for the same batch
(written by `images` as an NDArray file), it compares the model with them too. Each prints
one JSON line; a failed check exits non-zero.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
# resnet.cc's depths: ImageNet-style (blocks per stage, bottleneck) or CIFAR-style 6n+2.
IMAGENET = {18: ([2, 2, 2, 2], False), 34: ([3, 4, 6, 3], False), 50: ([3, 4, 6, 3], True),
            101: ([3, 4, 23, 3], True), 152: ([3, 8, 36, 3], True)}


def check(path, opset):
    import onnx
    onnx.checker.check_model(path, full_check=True)
    model = onnx.load(path)
    # The IR version of the first ONNX release that brought this opset.
    want_ir = min(ir for _, ir, op, *_ in onnx.helper.VERSION_TABLE if op == opset)
    ok = model.ir_version == want_ir
    print(json.dumps({"ok": ok, "ir_version": model.ir_version, "want_ir": want_ir,
                      "nodes": len(model.graph.node),
                      "metadata": {e.key: e.value for e in model.metadata_props}}))
    return ok


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        a = np.frombuffer(data[8 + n + begin:8 + n + end], DTYPES[e["dtype"]])
        tensors[name] = a.reshape(e["shape"]).astype(np.float64)
    return tensors, metadata


def conv(x, w, stride, pad):
    """x [N, C, H, W], w [K, C, R, S]; no bias."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    cols = np.empty((n, c, r, s, ho, wo))
    for i in range(r):
        for j in range(s):
            cols[:, :, i, j] = xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
    return np.tensordot(cols, w, axes=([1, 2, 3], [1, 2, 3])).transpose(0, 3, 1, 2)


def bn(x, t, name, eps=1e-5):
    g, b = t[name + ".weight"], t[name + ".bias"]
    m, v = t[name + ".running_mean"], t[name + ".running_var"]
    scale = g / np.sqrt(v + eps)
    return x * scale[None, :, None, None] + (b - m * scale)[None, :, None, None]


def maxpool3x3s2(x):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ho, wo = (x.shape[2] - 1) // 2 + 1, (x.shape[3] - 1) // 2 + 1
    return np.max([xp[:, :, i:i + 2 * ho:2, j:j + 2 * wo:2] for i in range(3) for j in range(3)],
                  axis=0)


def block(x, t, prefix, stride, bottleneck, v1):
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    if bottleneck:
        strides, kernels = ([stride, 1, 1] if v1 else [1, stride, 1]), [1, 3, 1]
    else:
        strides, kernels = [stride, 1], [3, 3]
    h = x
    for i, (s, k) in enumerate(zip(strides, kernels), 1):
        h = bn(conv(h, t["%s.conv%d.weight" % (prefix, i)], s, k // 2), t, "%s.bn%d" % (prefix, i))
        if i < len(strides):
            h = relu(h)
    if prefix + ".downsample.0.weight" in t:
        x = bn(conv(x, t[prefix + ".downsample.0.weight"], stride, 0), t, prefix + ".downsample.1")
    return relu(h + x)


def reference_forward(t, meta, x):
    layers = int(meta["num_layers"])
    blocks, bottleneck = IMAGENET.get(layers, ([(layers - 2) // 6] * 3, False))
    imagenet = layers in IMAGENET
    h = np.maximum(bn(conv(x, t["conv1.weight"], 2 if imagenet else 1, 3 if imagenet else 1),
                      t, "bn1"), 0)
    if imagenet:
        h = maxpool3x3s2(h)
    for stage, n in enumerate(blocks):
        for b in range(n):
            h = block(h, t, "layer%d.%d" % (stage + 1, b), 2 if stage > 0 and b == 0 else 1,
                      bottleneck, meta["network"] == "resnet-v1")
    return h.mean(axis=(2, 3)) @ t["fc.weight"].T + t["fc.bias"]


def batch(meta):
    """The fixed random batch every comparison uses, float32 NCHW."""
    c, h, w = (int(v) for v in meta["image_shape"].split(","))
    return np.random.RandomState(0).standard_normal((3, c, h, w)).astype(np.float32)


def write_ndarray(path, name, a):
    """One float32 array as MXNet's NDArray file (docs/ndarray.md), for `tally predict`."""
    a = np.ascontiguousarray(a, np.float32)
    head = struct.pack("<QQQIii", 0x112, 0, 1, 0xF993FAC9, 0, a.ndim) + struct.pack("<%dq" % a.ndim, *a.shape)
    body = struct.pack("<iii", 1, 0, 0) + a.tobytes()
    with open(path, "wb") as f:
        f.write(head + body + struct.pack("<QQ", 1, len(name)) + name.encode())


def read_ndarray(path):
    """The one float32 array `tally predict` writes."""
    with open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack_from("<i", data, 32)[0]
    shape = struct.unpack_from("<%dq" % ndim, data, 36)
    start = 36 + 8 * ndim + 12
    return np.frombuffer(data, np.float32, count=int(np.prod(shape)), offset=start).reshape(shape)


def images(reference_path, out_path):
    _, meta = read_safetensors(reference_path)
    write_ndarray(out_path, "data", batch(meta))
    print(json.dumps({"ok": True}))
    return True


def run(model_path, reference_path, tally_logits=None):
    import onnxruntime as ort
    t, meta = read_safetensors(reference_path)
    x = batch(meta)
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {"data": x})
    want = reference_forward(t, meta, x.astype(np.float64))
    diff = float(np.abs(got - want).max())
    scale = float(np.abs(want).max())
    # float32 against float64 differs by about 1e-7 of the largest logit. 1e-5 and not
    # looser: with --last-gamma a block after one step is nearly the identity, and a
    # bottleneck striding in the wrong convolution moved the logits by only 8e-5 of it.
    ok = got.shape == want.shape and got.dtype == np.float32 and diff <= 1e-5 * max(scale, 1.0)
    result = {"max_abs_diff": diff, "max_abs_logit": scale, "relative": diff / max(scale, 1e-30),
              "shape": list(got.shape), "onnxruntime": ort.__version__}
    if tally_logits:  # Tally's own forward pass (`tally predict`) on the same batch
        ours = read_ndarray(tally_logits)
        result["relative_to_tally"] = float(np.abs(got - ours).max()) / max(scale, 1e-30)
        ok = ok and ours.shape == got.shape and result["relative_to_tally"] <= 1e-5
    print(json.dumps(dict(result, ok=ok)))
    return ok


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "check":
        ok = check(args[0], int(args[1]))
    elif mode == "images":
        ok = images(args[0], args[1])
    else:
        ok = run(*args)
    sys.exit(0 if ok else 1)
