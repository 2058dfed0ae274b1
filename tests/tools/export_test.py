"""`tally export` against PyTorch: the exported file must load into torchvision's ResNet-18
and tools/torch_cifar_resnet.py's ResNet-20 with load_state_dict(strict=True), every tensor
equal, bit for bit, to the checkpoint's after the layout change.

Usage: /usr/bin/python3 export_test.py TALLY_BINARY [unittest args, such as a test class]

Needs Debian's python3-torch and python3-torchvision (tools/install_deps.sh installs them);
without them the test fails, it never skips. Safetensors files are read and written here by
hand (8-byte header length, JSON header, raw data): the `safetensors` package is not needed.

ExportTest writes the .params checkpoints itself, in Tally's layout, from PyTorch models whose
every weight and buffer is random. TrainCheckpointTest exports a checkpoint made by
`tally train --model-prefix`.
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as e:
    sys.exit("export_test: FAILED: %s. This test needs Debian's python3-torch and "
             "python3-torchvision under %s (tools/install_deps.sh installs them)"
             % (e, sys.executable))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_cifar_resnet import cifar_resnet  # noqa: E402

TALLY = None
NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
STEP = 7


def read_safetensors(path):
    """Returns ({name: torch tensor}, {name: dtype name}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    tensors, dtypes = {}, {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        a = np.frombuffer(data, NUMPY_DTYPES[e["dtype"]], offset=8 + n + begin,
                          count=(end - begin) // np.dtype(NUMPY_DTYPES[e["dtype"]]).itemsize)
        tensors[name] = torch.from_numpy(a.copy().reshape(e["shape"]))
        dtypes[name] = e["dtype"]
    return tensors, dtypes, metadata


def torch_name(module_name):
    """The torchvision name of a parameter under MXNet's Module names (docs/mxnet.md)."""
    bn = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean", "moving_var": "running_var"}
    n = module_name.split(":", 1)[1]
    m = re.fullmatch(r"stage(\d+)_unit(\d+)_(conv\d+|bn\d+|conv1sc|sc)_(\w+)", n)
    if m:
        layer = "layer%s.%d." % (m.group(1), int(m.group(2)) - 1)
        part, field = m.group(3), m.group(4)
        if part == "conv1sc":
            return layer + "downsample.0.weight"
        if part == "sc":
            return layer + "downsample.1." + bn[field]
        return layer + part + "." + (field if part.startswith("conv") else bn[field])
    if n == "conv0_weight":
        return "conv1.weight"
    if n.startswith("bn0_"):
        return "bn1." + bn[n[4:]]
    return "fc." + n[4:]  # fc1_weight, fc1_bias


def read_checkpoint(path):
    """({torchvision name: tensor, convolutions [K, R, S, C] as Tally holds them}, metadata)
    of a .params: an MXNet NDArray file (Module names, OIHW; docs/ndarray.md) or, in
    version 1, safetensors."""
    with open(path, "rb") as f:
        data = f.read()
    if struct.unpack_from("<Q", data)[0] != 0x112:
        tensors, _, metadata = read_safetensors(path)
        return tensors, metadata
    (count,), pos, arrays = struct.unpack_from("<Q", data, 16), 24, []
    for _ in range(count):
        (ndim,) = struct.unpack_from("<i", data, pos + 8)
        shape = struct.unpack_from("<%dq" % ndim, data, pos + 12)
        pos += 12 + 8 * ndim + 8
        (flag,) = struct.unpack_from("<i", data, pos)
        dtype = {0: np.float32, 3: np.uint8}[flag]
        a = np.frombuffer(data, dtype, offset=pos + 4, count=int(np.prod(shape)))
        arrays.append(a.copy().reshape(shape))
        pos += 4 + a.nbytes
    tensors, metadata = {}, {}
    pos += 8
    for a in arrays:
        (n,) = struct.unpack_from("<Q", data, pos)
        name = data[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        if name == "tally:metadata":
            metadata = json.loads(a.tobytes())
            continue
        t = torch.from_numpy(a)
        tensors[torch_name(name)] = t.permute(0, 2, 3, 1).contiguous() if t.dim() == 4 else t
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    """tensors: [(name, float32 torch tensor)], written in that order."""
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, t in tensors:
        b = t.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def to_tally_layout(state_dict):
    """A .params checkpoint's tensors: no num_batches_tracked, convolutions [K, R, S, C]."""
    return [(name, t.permute(0, 2, 3, 1) if t.dim() == 4 else t)
            for name, t in state_dict.items() if not name.endswith("num_batches_tracked")]


def randomise(model, seed):
    """Every weight and buffer random (running_var positive), so no tensor is 0 or 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            r = torch.randn(t.shape, generator=g)
            t.copy_(r.abs() + 0.5 if name.endswith("running_var") else r)
    return model


def params_metadata(num_layers, num_classes, step=STEP):
    return {"format": "tally-params", "version": "1", "network": "resnet",
            "num_layers": str(num_layers), "num_classes": str(num_classes),
            "image_shape": "3,32,32", "epoch": "3", "batch": "0", "step": str(step)}


def run_tally(*args):
    return subprocess.run([TALLY, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120)


class ExportChecks(unittest.TestCase):
    def export(self, params, out, *extra):
        r = run_tally("export", params, out, *extra)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn(out, r.stdout)
        self.assertFalse(os.path.exists(out + ".tmp"))
        return r.stdout

    def check_export(self, make_model, params, out, step, dtype="F32"):
        """Loads `out` strictly into a fresh model; compares it to the checkpoint `params`."""
        ckpt, _ = read_checkpoint(params)
        exported, dtypes, metadata = read_safetensors(out)
        self.assertEqual(metadata.get("format"), "pt")
        model = make_model()
        model.load_state_dict(exported, strict=True)  # raises on a missing or extra name
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                self.assertEqual(dtypes[name], "I64", name)
                self.assertEqual(exported[name].shape, torch.Size([]), name)
                self.assertEqual(int(t), step, name)
                continue
            self.assertEqual(dtypes[name], dtype, name)
            c = ckpt[name]
            want = c.permute(0, 3, 1, 2) if c.dim() == 4 else c
            if dtype == "F16":
                want = want.half()
            self.assertEqual(exported[name].shape, want.shape, name)
            self.assertTrue(torch.equal(exported[name], want), name)
        self.assertEqual(len(exported), len(model.state_dict()))
        return model


class ExportTest(ExportChecks):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = lambda name: os.path.join(self.dir.name, name)

    def tearDown(self):
        self.dir.cleanup()

    def write_params(self, model, num_layers, num_classes):
        params = self.path("m-0003.params")
        write_safetensors(params, to_tally_layout(model.state_dict()),
                          params_metadata(num_layers, num_classes))
        return params

    def test_torchvision_resnet18(self):
        source = randomise(torchvision.models.resnet18(num_classes=10), seed=1)
        params = self.write_params(source, 18, 10)
        out = self.path("resnet18.safetensors")
        self.export(params, out)
        model = self.check_export(lambda: torchvision.models.resnet18(num_classes=10),
                                  params, out, STEP)
        for name, t in source.state_dict().items():  # the round trip changes nothing
            if not name.endswith("num_batches_tracked"):
                self.assertTrue(torch.equal(model.state_dict()[name], t), name)

    def test_cifar_resnet20(self):
        params = self.write_params(randomise(cifar_resnet(20, num_classes=10), seed=2), 20, 10)
        out = self.path("resnet20.safetensors")
        self.export(params, out)
        self.check_export(lambda: cifar_resnet(20, num_classes=10), params, out, STEP)

    def test_float16_and_flag_form(self):
        params = self.write_params(randomise(cifar_resnet(20, num_classes=4), seed=3), 20, 4)
        out = self.path("resnet20_f16.safetensors")
        r = run_tally("export", "--params", params, "--out", out, "--dtype", "float16")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.check_export(lambda: cifar_resnet(20, num_classes=4), params, out, STEP, "F16")

    def assertFails(self, result, *needles):
        self.assertNotEqual(result.returncode, 0, result.stdout)
        for n in needles:
            self.assertIn(n, result.stdout)

    def test_bad_inputs_fail_naming_the_file(self):
        out = self.path("out.safetensors")
        garbage = self.path("garbage.params")
        with open(garbage, "wb") as f:
            f.write(b"this is not a checkpoint\n" * 10)
        self.assertFails(run_tally("export", garbage, out), garbage)
        missing = self.path("missing.params")
        self.assertFails(run_tally("export", missing, out), missing)
        not_params = self.path("not_params.safetensors")
        write_safetensors(not_params, [("w", torch.zeros(2))], {"format": "pt"})
        self.assertFails(run_tally("export", not_params, out), not_params, "tally-params")
        # A checkpoint whose tensors are not its metadata's model: the fc of 10 classes
        # where the metadata says 5.
        wrong = self.write_params(cifar_resnet(20, num_classes=10), 20, 5)
        self.assertFails(run_tally("export", wrong, out), wrong, "fc.weight")
        self.assertFails(run_tally("export", wrong), "expected PARAMS and OUT")
        self.assertEqual(os.listdir(self.dir.name).count("out.safetensors"), 0)
        self.assertFalse(any(n.endswith(".tmp") for n in os.listdir(self.dir.name)))


class TrainCheckpointTest(ExportChecks):
    """A checkpoint written by `tally train` itself."""

    def test_train_then_export(self):
        with tempfile.TemporaryDirectory() as d:
            prefix = os.path.join(d, "m")
            r = run_tally("train", "--network", "resnet", "--num-layers", "18",
                          "--image-shape", "3,32,32", "--num-classes", "10",
                          "--num-examples", "32", "--batch-size", "16", "--num-epochs", "1",
                          "--num-val-examples", "0", "--model-prefix", prefix)
            self.assertEqual(r.returncode, 0, r.stdout)
            params = prefix + "-0001.params"
            _, metadata = read_checkpoint(params)
            self.assertEqual(metadata["step"], "2")  # 32 examples, batches of 16
            out = os.path.join(d, "resnet18.safetensors")
            self.export(params, out)
            self.check_export(lambda: torchvision.models.resnet18(num_classes=10),
                              params, out, 2)


if __name__ == "__main__":
    TALLY = sys.argv.pop(1)
    unittest.main(verbosity=2)
