"""Helpers shared by Tally's Python tests (tests/*/*_test.py).

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from testutil import free_port, read_tensors  # tests/testutil.py

    port = free_port()                             # for DMLC_PS_ROOT_PORT
    tensors, meta = read_tensors(prefix + "-0001.params")
"""
import json
import os
import struct
import sys


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now, below the kernel's ephemeral range
    (tools/launcher/job.py free_port says why: the job's own processes bind in that range)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from launcher.job import free_port as launcher_free_port
    return launcher_free_port("127.0.0.1")


NDARRAY_MAGIC = 0x112


def _read_ndarray_file(data):
    """{name: raw bytes} of an MXNet NDArray file as Tally writes it (version 2 arrays,
    docs/ndarray.md), and the JSON of its tally:metadata array."""
    magic, _, count = struct.unpack_from("<QQQ", data, 0)
    pos, raw = 24, []
    for _ in range(count):
        _, _, ndim = struct.unpack_from("<Iii", data, pos)
        pos += 12
        dims = struct.unpack_from("<%dq" % ndim, data, pos)
        pos += 8 * ndim
        _, _, flag = struct.unpack_from("<iii", data, pos)
        pos += 12
        size = {0: 4, 2: 2, 3: 1, 4: 4, 12: 2}[flag]
        for d in dims:
            size *= d
        raw.append(data[pos:pos + size])
        pos += size
    (names,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    tensors = {}
    for i in range(names):
        (n,) = struct.unpack_from("<Q", data, pos)
        tensors[data[pos + 8:pos + 8 + n].decode()] = raw[i]
        pos += 8 + n
    meta = json.loads(tensors.pop("tally:metadata", b"{}"))
    return tensors, meta


def read_tensors(path):
    """{name: raw bytes} and the metadata of a safetensors file, or of a .params file (an
    NDArray file with Tally's metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) >= 8 and struct.unpack("<Q", data[:8])[0] == NDARRAY_MAGIC:
        return _read_ndarray_file(data)
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

