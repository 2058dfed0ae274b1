"""`tally export --format onnx` against onnx and onnxruntime: checkpoints made by `tally train`
(a CIFAR ResNet-8, and ResNet-50s of both stride placements on 64x64 images) are exported;
onnx.checker.check_model(full_check=True) must accept every file, and onnxruntime's logits
for a fixed random batch must match, within 1e-5 of the largest logit, a float64 numpy
ResNet built from the same checkpoint's safetensors export (tests/tools/onnx_venv_checks.py)
and, for float32 weights, Tally's own forward pass (`tally predict`).

Usage: python3 onnx_export_test.py TALLY_BINARY BUILD_DIR [unittest args]

onnx and onnxruntime come from tests/compat_venv.py's environment under BUILD_DIR. Without
onnx the whole test prints a "SKIPPED compat:" line and exits 0; without onnxruntime only the
comparison is skipped, saying why, and the checker still runs.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import compat_venv  # noqa: E402

CHECKS = os.path.join(HERE, "onnx_venv_checks.py")
TALLY = BUILD_DIR = ONNX_PYTHON = None
RUNTIME_PYTHON, RUNTIME_MISSING = None, ""


def run_tally(*args):
    return subprocess.run([TALLY, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300)


def venv_check(python, *args):
    """Runs onnx_venv_checks.py; returns (exit status, its JSON line or the output)."""
    r = subprocess.run([python, CHECKS, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    lines = r.stdout.strip().splitlines()
    try:
        return r.returncode, json.loads(lines[-1])
    except (IndexError, ValueError):
        return r.returncode, r.stdout


class OnnxExportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = lambda name: os.path.join(self.dir.name, name)

    def tearDown(self):
        self.dir.cleanup()

    def train(self, *model):
        """A checkpoint after a few steps on synthetic data; returns its .params path."""
        prefix = self.path("m")
        r = run_tally("train", *model, "--num-epochs", "1", "--num-val-examples", "0",
                      "--model-prefix", prefix)
        self.assertEqual(r.returncode, 0, r.stdout)
        return prefix + "-0001.params"

    def export(self, params, out, *flags):
        r = run_tally("export", params, out, *flags)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn(out, r.stdout)
        self.assertFalse(os.path.exists(out + ".tmp"))
        return r.stdout

    def check(self, onnx_path, opset=13):
        rc, result = venv_check(ONNX_PYTHON, "check", onnx_path, str(opset))
        self.assertEqual(rc, 0, result)
        print("checker: %s opset %d: %s" % (os.path.basename(onnx_path), opset, result))
        return result

    def compare(self, onnx_path, reference, params):
        """onnxruntime against the numpy reference and, given the checkpoint, Tally's own
        forward pass (`tally predict`), or a printed reason why not."""
        if RUNTIME_PYTHON is None:
            print("onnxruntime comparison of %s skipped: %s" % (onnx_path, RUNTIME_MISSING))
            return
        extra = []
        if params is not None:
            images, logits = onnx_path + ".images.nd", onnx_path + ".logits.nd"
            rc, result = venv_check(RUNTIME_PYTHON, "images", reference, images)
            self.assertEqual(rc, 0, result)
            r = run_tally("predict", params, images, logits)
            self.assertEqual(r.returncode, 0, r.stdout)
            extra = [logits]
        rc, result = venv_check(RUNTIME_PYTHON, "run", onnx_path, reference, *extra)
        self.assertEqual(rc, 0, result)
        print("onnxruntime vs numpy and tally predict: %s: %s" % (os.path.basename(onnx_path), result))

    def test_cifar_resnet8_float32_float16_and_opsets(self):
        params = self.train("--num-layers", "8", "--num-classes", "4", "--image-shape", "3,16,16",
                            "--batch-size", "8", "--num-examples", "16")
        out = self.path("resnet8.onnx")
        printed = self.export(params, out, "--format", "onnx")
        self.assertIn("opset 13, IR 7", printed)
        result = self.check(out)
        self.assertEqual(result["nodes"], 31)
        self.assertEqual(result["metadata"], {"network": "resnet", "num_layers": "8",
                                              "num_classes": "4", "image_shape": "3,16,16",
                                              "step": "2"})
        for opset in (11, 17, 21):
            other = self.path("resnet8_opset%d.onnx" % opset)
            self.export(params, other, "--format", "onnx", "--opset", str(opset))
            self.check(other, opset)
        half = self.path("resnet8_f16.onnx")
        self.export(params, half, "--format", "onnx", "--dtype", "float16")
        self.assertLess(os.path.getsize(half), 0.6 * os.path.getsize(out))
        self.check(half)
        # Each ONNX file against the reference from the same weights: float16 ones from the
        # float16 safetensors export, so both compute with identically rounded weights.
        for dtype, model in (("float32", out), ("float16", half)):
            reference = self.path("resnet8_%s.safetensors" % dtype)
            self.export(params, reference, "--dtype", dtype)
            # Tally computes with the float32 weights: only the float32 file is compared with it.
            self.compare(model, reference, params if dtype == "float32" else None)

    def test_resnet50_both_stride_placements(self):
        # --last-gamma starts every block as the identity, so a model after one step still
        # has logits of moderate size in inference mode.
        for network in ("resnet", "resnet-v1"):
            params = self.train("--network", network, "--num-layers", "50", "--num-classes",
                                "10", "--image-shape", "3,64,64", "--batch-size", "2",
                                "--num-examples", "2", "--last-gamma")
            out = self.path("%s-50.onnx" % network)
            self.export(params, out, "--format", "onnx")
            self.assertEqual(self.check(out)["nodes"], 175)
            reference = self.path("%s-50.safetensors" % network)
            self.export(params, reference)
            self.compare(out, reference, params)

    def test_refusals_name_the_flag(self):
        params = self.train("--num-layers", "8", "--num-classes", "4", "--image-shape", "3,16,16",
                            "--batch-size", "8", "--num-examples", "8")
        out = self.path("refused.onnx")
        for flags, needle in ((["--format", "tflite"], "--format 'tflite'"),
                              (["--format", "onnx", "--dtype", "bfloat16"], "--dtype bfloat16"),
                              (["--format", "onnx", "--opset", "9"], "--opset 9")):
            r = run_tally("export", params, out, *flags)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn(needle, r.stdout)
            self.assertFalse(os.path.exists(out))
            self.assertFalse(os.path.exists(out + ".tmp"))


if __name__ == "__main__":
    TALLY, BUILD_DIR = sys.argv.pop(1), sys.argv.pop(1)
    ONNX_PYTHON = compat_venv.python_with("onnx", BUILD_DIR)  # exits 0, SKIPPED, without
    RUNTIME_PYTHON, RUNTIME_MISSING = compat_venv.ensure("onnxruntime", BUILD_DIR)
    unittest.main(verbosity=2)
