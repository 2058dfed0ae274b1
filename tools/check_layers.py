#!/usr/bin/env python3
"""Checks that Tally's libraries depend on each other one way, and that no source is too long.

    python3 tools/check_layers.py [SOURCE_DIR]      # exit 1 and one line per violation

Each top-level folder builds one library. LAYERS below says which folders each may use
directly; a folder may also use whatever those use (the closure), and nothing else. Two
kinds of use are checked: a library named in a folder's target_link_libraries (CMakeLists.txt
of the folder and its subfolders), and an `#include "folder/..."` in one of its sources.
A violation names the file, the line and the two folders. tests/ may use anything.

Also fails on a source file (C++, CUDA, Python) of more than MAX_LINES lines, and on a C++
function (a gtest TEST body included) of more than MAX_FUNCTION_LINES lines, anywhere but the
build directories. Functions are found by matching braces in the source without comments,
strings and preprocessor lines: a `{` after a `)` (and const, noexcept, override, an
initializer list or a trailing return type) at namespace or class scope opens a function;
lambdas and blocks inside one count as its lines. LONG_FUNCTIONS lists the ones that were
longer when the check came, each to be split; a listed function that is no longer too long
is reported too, so that the list only shrinks.

The order is the one in the top-level CMakeLists.txt and README's "Layout"; change the
three together.
"""
import os
import re
import sys

# folder -> the folders it may use directly (besides those they may use).
LAYERS = {
    "base": [],  # Status, dtypes, host tensors: no CUDA
    "ops": ["base"],
    "profile": ["base"],
    "tensorboard": ["base"],  # event files: Protobuf, no CUDA
    "net": ["base", "profile"],
    "compress": ["ops"],  # gradient compression ops, CPU and CUDA
    "optim": ["ops"],
    "models": ["ops"],
    "data": ["ops", "profile"],
    "kvstore": ["optim", "net", "ops", "compress"],
    "server": ["optim", "net", "compress"],
    "scheduler": ["net"],  # and so never ops: it links no CUDA library
    "plan": ["models", "kvstore"],
    "worker": ["models", "kvstore", "profile", "tensorboard"],
    "tools": ["worker", "data", "profile", "scheduler", "server", "plan"],
    "python": ["kvstore", "server", "scheduler", "models"],
}
MAX_LINES = 600
MAX_FUNCTION_LINES = 80
# file:function -> lines when the check came. Remove an entry once its function is split.
LONG_FUNCTIONS = {
    "tests/models/resnet_torch_test.cc:TEST_P(ResNetTorchTest, OneTrainingStepMatchesPyTorch)": 108,
    "tools/bench_compute.cc:MedianStepSeconds": 93,
    "tools/report/merge.cc:MergeTraces": 90,
}
SOURCE_EXT = (".cc", ".h", ".cu", ".cuh", ".inc", ".cpp", ".py")
CXX_EXT = (".cc", ".h", ".cu", ".cuh", ".inc", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/')
TARGET_DEF = re.compile(r"\badd_(?:library|executable)\(\s*([A-Za-z0-9_]+)")
TARGET_USE = re.compile(r"\btarget_link_libraries\(")


def closure(folder):
    seen, todo = set(), list(LAYERS[folder])
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(LAYERS[f])
    return seen


def walk(root, top):
    for d, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for f in sorted(files):
            yield os.path.join(d, f)


def cmake_files(root, folder):
    return [p for p in walk(root, folder) if os.path.basename(p) == "CMakeLists.txt"]


def strip_comment(line):
    return line.split("#", 1)[0]


def targets_by_folder(root):
    """Maps each CMake target defined under a layered folder to that folder."""
    owner = {}
    for folder in LAYERS:
        for path in cmake_files(root, folder):
            with open(path, errors="replace") as f:
                for line in f:
                    for name in TARGET_DEF.findall(strip_comment(line)):
                        owner[name] = folder
    return owner


def link_violations(root, owner):
    out = []
    for folder in LAYERS:
        allowed = closure(folder) | {folder}
        for path in cmake_files(root, folder):
            with open(path, errors="replace") as f:
                lines = [strip_comment(l) for l in f]
            # A target_link_libraries call may span lines: read to its closing parenthesis.
            for i, line in enumerate(lines):
                m = TARGET_USE.search(line)
                if not m:
                    continue
                text, depth, j, k = "", 0, i, m.end() - 1
                while j < len(lines):
                    for ch in lines[j][k:]:
                        depth += ch == "("
                        depth -= ch == ")"
                        text += ch
                        if depth == 0:
                            break
                    if depth == 0:
                        break
                    j, k = j + 1, 0
                    text += " "
                tokens = re.findall(r"[A-Za-z0-9_]+", text)
                for name in tokens[1:]:
                    dep = owner.get(name)
                    if dep and dep not in allowed:
                        out.append(f"{os.path.relpath(path, root)}:{i + 1}: {folder} links {name} "
                                   f"of {dep}, which is not below {folder}")
    return out


def include_violations(root):
    out = []
    for folder in LAYERS:
        allowed = closure(folder) | {folder}
        for path in walk(root, folder):
            if not path.endswith(CXX_EXT):
                continue
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(1) in LAYERS and m.group(1) not in allowed:
                        out.append(f"{os.path.relpath(path, root)}:{n}: {folder} includes "
                                   f"{m.group(1)}/, which is not below {folder}")
    return out


def long_files(root):
    out = []
    for top in sorted(os.listdir(root)):
        if top.startswith(".") or top.startswith("build") or not os.path.isdir(os.path.join(root, top)):
            continue
        for path in walk(root, top):
            if path.endswith(SOURCE_EXT):
                with open(path, errors="replace") as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:
                    out.append(f"{os.path.relpath(path, root)}:{n}: {n} lines, over {MAX_LINES}")
    return out


def strip_cxx(src):
    """src without comments, string and character literals and preprocessor lines; the
    newlines stay, so that positions keep their line numbers."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i) or (c == "#" and not src[src.rfind("\n", 0, i) + 1:i].strip()):
            j = i
            while True:  # to the end of the line, with a directive's continuations
                k = src.find("\n", j)
                if k < 0:
                    k = n
                    break
                if c == "#" and src[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            out.append("\n" * src.count("\n", i, k))
            i = k
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif src.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', src[i:]):
            end = ")" + re.match(r'R"([^(\s]*)\(', src[i:]).group(1) + '"'
            j = src.find(end, i)
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and src[i - 1].isalnum())):
            j = i + 1  # a ' after a digit or letter is a digit separator (1'000)
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNCTION_END = re.compile(r"\)\s*(?:const|noexcept|override|final|mutable|->[^{;]*|:[^{;]*|\s)*$")


def function_name(pre):
    head = pre[:pre.find("(")] if "(" in pre else pre
    words = re.findall(r"[A-Za-z0-9_~:]+", head)
    name = words[-1].split("::")[-1] if words else "?"
    if name.startswith("TEST"):  # gtest: the suite and the case name it
        args = re.match(r"\(([^)]*)\)", pre[pre.find("("):])
        name += "(" + re.sub(r"\s+", " ", args.group(1).strip()) + ")" if args else ""
    return name


def functions(src):
    """(name, first line, lines) of each function defined in C++ source src."""
    s, stack, last, line, found = strip_cxx(src), [], 0, 1, []
    for i, c in enumerate(s):
        if c == "\n":
            line += 1
        if c not in ";{}":
            continue
        if c == "{":
            pre = s[last:i]
            outer = all(kind in ("namespace", "class") for kind, _, _ in stack)
            if re.search(r"\bnamespace\b", pre) or re.search(r'extern\s*""\s*$', pre):
                stack.append(("namespace", line, ""))
            elif re.search(r"\b(class|struct|union|enum)\b[^()]*$", pre) and "=" not in pre:
                stack.append(("class", line, ""))
            elif outer and FUNCTION_END.search(pre) and not pre.rstrip().endswith("="):
                stack.append(("function", line, function_name(pre.strip())))
            else:
                stack.append(("block", line, ""))
        elif c == "}" and stack:
            kind, first, name = stack.pop()
            if kind == "function":
                found.append((name, first, line - first + 1))
        last = i + 1
    return found


def long_functions(root):
    out, seen = [], set()
    for top in sorted(os.listdir(root)):
        if top.startswith(".") or top.startswith("build") or not os.path.isdir(os.path.join(root, top)):
            continue
        for path in walk(root, top):
            if not path.endswith(CXX_EXT):
                continue
            rel = os.path.relpath(path, root)
            with open(path, errors="replace") as f:
                src = f.read()
            for name, first, n in functions(src):
                key = f"{rel}:{name}"
                if key in LONG_FUNCTIONS:
                    seen.add(key)
                    if n <= LONG_FUNCTIONS[key]:
                        if n <= MAX_FUNCTION_LINES:
                            out.append(f"{rel}:{first}: {name} is {n} lines now: remove it from LONG_FUNCTIONS")
                        continue
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{rel}:{first}: function {name}: {n} lines, over {MAX_FUNCTION_LINES}")
    for key in sorted(set(LONG_FUNCTIONS) - seen):
        out.append(f"{key}: listed in LONG_FUNCTIONS but not found: remove it")
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    missing = [f for f in LAYERS if not os.path.isdir(os.path.join(root, f))]
    if missing:
        print("check_layers: no folder " + ", ".join(missing) + " (update LAYERS)")
        return 1
    owner = targets_by_folder(root)
    problems = (link_violations(root, owner) + include_violations(root) + long_files(root) +
                long_functions(root))
    for p in problems:
        print(p)
    checked = ", ".join(f"{f} <- {'/'.join(LAYERS[f]) or '-'}" for f in LAYERS)
    print(f"check_layers: {len(problems)} problem(s); order: {checked}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
