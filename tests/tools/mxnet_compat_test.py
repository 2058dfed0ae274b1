"""Tally's checkpoints in MXNet 1.9.1, and MXNet's and Gluon's weights in Tally: the same
outputs for the same input, both ways.

Usage: python3 mxnet_compat_test.py TALLY_BINARY BUILD_DIR [unittest args, such as a class]

MXNet runs in a virtual environment made from PyPI under BUILD_DIR/compat-venv
(tests/compat_venv.py); when it cannot be made the test prints why it is skipped. Each check
runs a small script in that environment (MXNET_SCRIPT below) and compares its outputs with
`tally predict`'s on the same images, as NDArray files.

TallyToMxnetTest   tally train writes PREFIX-0001.params and PREFIX-symbol.json;
                   mx.model.load_checkpoint and a Module give Tally's logits.
MxnetToTallyTest   Gluon resnet50_v1 / resnet18_v1 files and a Module checkpoint give
                   MXNet's logits in Tally (tally predict, train --load-epoch and
                   --pretrained).
"""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import compat_venv  # noqa: E402 (tests/compat_venv.py)

TALLY = None
BUILD_DIR = None
PYTHON = None  # the venv's, with MXNet
TOLERANCE = 2e-4  # the largest logit difference over the largest logit

# Runs in the venv: `python - ACTION ARGS...`. Every action writes NDArray files.
MXNET_SCRIPT = r'''
import sys
import mxnet as mx
import numpy as np

def images(path, n, size):
    x = np.random.RandomState(7).uniform(-1, 1, (int(n), 3, int(size), int(size))).astype("float32")
    mx.nd.save(path, {"data": mx.nd.array(x)})
    return mx.nd.array(x)

def randomized(shapes):
    """Random weights and batch-norm statistics for {name: shape} (the defaults, 0 and 1,
    would hide a mix-up)."""
    rs, out = np.random.RandomState(3), {}
    for name, shape in sorted(shapes.items()):
        if name.endswith(("running_var", "moving_var", "gamma")):
            v = rs.uniform(0.5, 1.5, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            v = rs.normal(0, 1.0 / np.sqrt(fan_in), shape)
        out[name] = mx.nd.array(v.astype("float32"))
    return out

def load_checkpoint(prefix, epoch, images_path, out):
    sym, arg, aux = mx.model.load_checkpoint(prefix, int(epoch))
    x = mx.nd.load(images_path)["data"]
    mod = mx.mod.Module(sym.get_internals()["fc1_output"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", x.shape)], for_training=False)
    mod.set_params(arg, aux)
    mod.forward(mx.io.DataBatch([x]), is_train=False)
    mx.nd.save(out, {"logits": mod.get_outputs()[0], "arrays": mx.nd.array([len(arg), len(aux)])})

def gluon(model, classes, params_out, images_out, logits_out):
    net = getattr(mx.gluon.model_zoo.vision, model)(classes=int(classes))
    net.initialize()
    x = images(images_out, 4, 32)
    net(x)
    params = net._collect_params_with_prefix()
    for name, value in randomized({k: p.shape for k, p in params.items()}).items():
        params[name].set_data(value)
    net.save_parameters(params_out)
    mx.nd.save(logits_out, {"logits": net(x)})

def unit(data, filters, stride, projection, name):
    """A bottleneck of MXNet's resnet-v1 symbol (the stride in the first 1x1), eps 1e-5."""
    bn = lambda d, n: mx.sym.BatchNorm(d, fix_gamma=False, eps=1e-5, name=name + n)
    conv = lambda d, f, k, s, n: mx.sym.Convolution(d, num_filter=f, kernel=(k, k), stride=(s, s),
                                                    pad=(k // 2, k // 2), no_bias=True, name=name + n)
    h = mx.sym.relu(bn(conv(data, filters // 4, 1, stride, "_conv1"), "_bn1"))
    h = mx.sym.relu(bn(conv(h, filters // 4, 3, 1, "_conv2"), "_bn2"))
    h = bn(conv(h, filters, 1, 1, "_conv3"), "_bn3")
    short = bn(conv(data, filters, 1, stride, "_conv1sc"), "_sc") if projection else data
    return mx.sym.relu(h + short)

def module(prefix, classes, images_out, logits_out):
    data = mx.sym.var("data")
    h = mx.sym.Convolution(data, num_filter=64, kernel=(7, 7), stride=(2, 2), pad=(3, 3), no_bias=True, name="conv0")
    h = mx.sym.relu(mx.sym.BatchNorm(h, fix_gamma=False, eps=1e-5, name="bn0"))
    h = mx.sym.Pooling(h, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    for stage, (units, filters) in enumerate(zip([3, 4, 6, 3], [256, 512, 1024, 2048])):
        for u in range(units):
            h = unit(h, filters, 2 if stage > 0 and u == 0 else 1, u == 0, "stage%d_unit%d" % (stage + 1, u + 1))
    h = mx.sym.Flatten(mx.sym.Pooling(h, global_pool=True, kernel=(7, 7), pool_type="avg"))
    fc = mx.sym.FullyConnected(h, num_hidden=int(classes), name="fc1")
    mod = mx.mod.Module(mx.sym.SoftmaxOutput(fc, name="softmax"), context=mx.cpu())
    x = images(images_out, 4, 32)
    mod.bind(data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", (4,))], for_training=False)
    mod.init_params(mx.init.Xavier())
    arg, aux = mod.get_params()
    mod.set_params(randomized({k: v.shape for k, v in arg.items()}), randomized({k: v.shape for k, v in aux.items()}))
    mod.save_checkpoint(prefix, 1)
    logits = mx.mod.Module(fc, label_names=None, context=mx.cpu())
    logits.bind(data_shapes=[("data", x.shape)], for_training=False)
    logits.set_params(*mod.get_params())
    logits.forward(mx.io.DataBatch([x]), is_train=False)
    mx.nd.save(logits_out, {"logits": logits.get_outputs()[0]})

def difference(a_path, b_path):
    a = mx.nd.load(a_path)["logits"].asnumpy()
    b = mx.nd.load(b_path)["logits"].asnumpy()
    assert a.shape == b.shape, (a.shape, b.shape)
    print("%.3e" % (np.abs(a - b).max() / np.abs(a).max()))

globals()[sys.argv[1]](*sys.argv[2:])
'''


def mxnet(*args):
    """Runs MXNET_SCRIPT's action in the venv; its stdout."""
    r = subprocess.run([PYTHON, "-c", MXNET_SCRIPT] + [str(a) for a in args], capture_output=True, text=True,
                       env=dict(os.environ, MXNET_SUBGRAPH_VERBOSE="0", OMP_NUM_THREADS="2"))
    if r.returncode != 0:
        raise AssertionError("MXNet script %s failed:\n%s%s" % (args[0], r.stdout, r.stderr[-3000:]))
    return r.stdout


def tally(*args):
    r = subprocess.run([TALLY] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("tally %s failed (%d):\n%s%s" % (args[0], r.returncode, r.stdout, r.stderr))
    return r.stdout + r.stderr


class CompatCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = lambda name: os.path.join(self.dir.name, name)

    def tearDown(self):
        self.dir.cleanup()

    def assertSameLogits(self, a, b, what):
        diff = float(mxnet("difference", a, b).strip())
        print("%s: max |difference| / max |logit| = %.2e" % (what, diff))
        self.assertLess(diff, TOLERANCE, what)


class TallyToMxnetTest(CompatCase):
    def check(self, network):
        prefix = self.path(network)
        tally("train", "--network", network, "--num-layers", "50", "--num-classes", "5", "--image-shape", "3,32,32",
              "--batch-size", "8", "--num-examples", "16", "--num-epochs", "1", "--num-val-examples", "0",
              "--lr", "0.01", "--seed", "2", "--model-prefix", prefix)
        self.assertTrue(os.path.exists(prefix + "-symbol.json"))
        images = self.path("x.nd")
        mxnet("images", images, 4, 32)
        mxnet("load_checkpoint", prefix, 1, images, self.path("mxnet.nd"))
        tally("predict", prefix + "-0001.params", images, self.path("tally.nd"))
        self.assertSameLogits(self.path("mxnet.nd"), self.path("tally.nd"), "%s-50: MXNet on Tally's checkpoint" % network)

    def test_resnet_v1b_checkpoint_runs_in_mxnet(self):
        self.check("resnet")

    def test_resnet_v1_checkpoint_runs_in_mxnet(self):
        self.check("resnet-v1")


class MxnetToTallyTest(CompatCase):
    def test_gluon_model_zoo_files(self):
        for model, layers in (("resnet50_v1", 50), ("resnet18_v1", 18)):
            params, images, logits = self.path(model + ".params"), self.path("x.nd"), self.path(model + ".nd")
            mxnet("gluon", model, 5, params, images, logits)
            out = tally("predict", params, images, self.path("tally.nd"), "--network", "resnet-v1",
                        "--num-layers", layers, "--num-classes", 5)
            self.assertIn("Gluon resnet_v1", out)
            self.assertSameLogits(logits, self.path("tally.nd"), "Gluon %s in Tally" % model)

    def test_module_checkpoint_loads_with_load_epoch(self):
        prefix, images, logits = self.path("mx"), self.path("x.nd"), self.path("mx.nd")
        mxnet("module", prefix, 5, images, logits)
        out = tally("predict", prefix + "-0001.params", images, self.path("tally.nd"), "--network", "resnet-v1",
                    "--num-layers", 50, "--num-classes", 5)
        self.assertIn("MXNet Module (resnet-v1 symbol)", out)
        self.assertSameLogits(logits, self.path("tally.nd"), "MXNet Module checkpoint in Tally")
        out = tally("train", "--network", "resnet-v1", "--num-layers", "50", "--num-classes", "5",
                    "--image-shape", "3,32,32", "--batch-size", "8", "--num-examples", "8", "--num-epochs", "2",
                    "--num-val-examples", "0", "--lr", "0.001", "--model-prefix", prefix, "--load-epoch", "1")
        self.assertIn("is MXNet's own checkpoint: training resumes in epoch 1", out)
        self.assertIn("Epoch[1] Train-accuracy", out)
        self.assertNotIn("Epoch[0]", out)
        self.assertTrue(os.path.exists(prefix + "-0002.params"))

    def test_pretrained_with_another_class_count(self):
        params, images, logits = self.path("g.params"), self.path("x.nd"), self.path("g.nd")
        mxnet("gluon", "resnet18_v1", 1000, params, images, logits)
        prefix = self.path("ft")
        out = tally("train", "--network", "resnet", "--num-layers", "18", "--num-classes", "10",
                    "--image-shape", "3,32,32", "--batch-size", "8", "--num-examples", "8", "--num-epochs", "1",
                    "--num-val-examples", "0", "--pretrained", params, "--model-prefix", prefix)
        self.assertIn("--pretrained: starting from the weights of %s (Gluon resnet_v1, " % params, out)
        self.assertIn("fc.weight and fc.bias initialised afresh", out)
        mxnet("load_checkpoint", prefix, 1, images, self.path("ft-mxnet.nd"))  # and MXNet runs the result


if __name__ == "__main__":
    TALLY, BUILD_DIR = sys.argv.pop(1), sys.argv.pop(1)
    PYTHON = compat_venv.python_with("mxnet", BUILD_DIR)
    unittest.main(verbosity=2)
