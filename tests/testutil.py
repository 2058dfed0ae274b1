"""Helpers shared by Tally's Python tests (tests/*/*_test.py).

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from testutil import free_port, read_tensors  # tests/testutil.py

    port = free_port()                             # for DMLC_PS_ROOT_PORT
    tensors, meta = read_tensors(prefix + "-0001.params")
"""
import json
import os
import socket
import struct
import sys


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_tensors(path):
    """{name: raw bytes} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}, meta


def import_tally(package_root):
    """The `tally` Python package built in package_root (build/python), imported; when the
    extension was not built, prints why the test is skipped and exits 0 (ctest reads the
    SKIPPED line)."""
    import glob
    if not glob.glob(os.path.join(package_root, "tally", "_tally*.so")):
        print("SKIPPED python: no extension in %s/tally (configure found no pybind11 or no Python "
              "headers: tools/install_deps.sh installs them)" % package_root)
        sys.exit(0)
    sys.path.insert(0, package_root)
    import tally
    return tally

