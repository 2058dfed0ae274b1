"""A virtual environment with the tools Tally's formats are checked against: MXNet 1.9.1
(its NDArray .params, symbol JSON and Gluon model zoo), onnx's checker and onnxruntime.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import compat_venv                                   # tests/compat_venv.py
    python = compat_venv.python_with("mxnet", build_dir)  # or exits 0 printing SKIPPED

The environment is made once under BUILD_DIR/compat-venv from PyPI and then reused; tests
that run at once take turns making it (a lock file). numpy stays below 1.24 because MXNet
1.9.1 still uses numpy's removed aliases (np.bool). When PyPI cannot be reached, or a wheel
does not exist for this Python, the test prints why it is skipped and exits 0 (ctest reads
the SKIPPED line).
"""
import fcntl
import os
import subprocess
import sys

# What each check needs; installed in this order, each group on its own so that a missing
# onnxruntime wheel does not cost the MXNet checks.
PACKAGES = {
    "mxnet": ["mxnet==1.9.1", "numpy<1.24"],
    "onnx": ["onnx==1.23.2", "numpy<1.24"],
    "onnxruntime": ["onnxruntime==1.32.0", "numpy<1.24"],
}
SKIP_PREFIX = "SKIPPED compat:"


def _venv_python(root):
    return os.path.join(root, "bin", "python")


def _has(python, module):
    return subprocess.run([python, "-c", "import " + module], capture_output=True).returncode == 0


def ensure(module, build_dir):
    """The venv's python when `module` imports in it (installing it first), else (None, why)."""
    root = os.path.join(os.path.abspath(build_dir), "compat-venv")
    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = _venv_python(root)
        if not os.path.exists(python):
            made = subprocess.run([sys.executable, "-m", "venv", root], capture_output=True, text=True)
            if made.returncode != 0:
                return None, "cannot make a virtual environment: " + made.stderr.strip()[-300:]
        if _has(python, module):
            return python, ""
        print("compat_venv: installing %s into %s (once)" % (" ".join(PACKAGES[module]), root), flush=True)
        got = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check"] +
                             PACKAGES[module], capture_output=True, text=True, timeout=900)
        if got.returncode != 0 or not _has(python, module):
            return None, "pip could not install %s: %s" % (" ".join(PACKAGES[module]),
                                                           (got.stderr or got.stdout).strip()[-300:])
        return python, ""


def python_with(module, build_dir):
    """ensure(), or print the reason and exit 0 as a skipped test."""
    python, why = ensure(module, build_dir)
    if python is None:
        print("%s %s unavailable (%s)" % (SKIP_PREFIX, module, why))
        sys.exit(0)
    return python
