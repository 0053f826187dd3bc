"""The GPU kernels' sources, checked where there is no GPU (CI): each stage's ``cuda/<stage>.cu``
is compiled as one module, so a kernel name defined twice fails a module's compilation on the
device, and a kernel launched under a name its stage's source lacks fails at its first use."""

import os
import re

from sgsi.join.backends.gpu import launch

GPU_DIR = os.path.dirname(launch.__file__)
STAGES = sorted(f[:-3] for f in os.listdir(launch.CUDA_DIR) if f.endswith(".cu"))
_KERNEL = re.compile(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\(')


def _python(module):
    with open(os.path.join(GPU_DIR, module + ".py")) as f:
        return f.read()


def _defined(stage):
    return _KERNEL.findall(launch.source(stage))


def _launched():
    """(stage, kernel name) of each launch in the gpu package's modules: a module's
    ``kernel = Kernels("<stage>")`` names its stage; literal names, and those built from a prefix
    and the scan kinds of ``_SCAN_KERNELS``."""
    out = set()
    for f in sorted(os.listdir(GPU_DIR)):
        if not f.endswith(".py"):
            continue
        src = _python(f[:-3])
        names = set(re.findall(r'\bkernel\("(\w+)"\)', src))
        prefixes = re.findall(r'\bkernel\("(\w+_)" \+ kind\)', src)
        if not names and not prefixes:
            continue
        stage, = re.findall(r'^kernel = Kernels\("(\w+)"\)$', src, re.M)
        if prefixes:
            table = re.search(r"_SCAN_KERNELS = \{(.*?)\}", src, re.S).group(1)
            names |= {p + k for p in prefixes for k in re.findall(r':\s*"(\w+)"', table)}
        out |= {(stage, n) for n in names}
    return out


def test_stages_each_have_a_launcher_beside_them():
    assert STAGES == ["calibration", "expand", "filter", "join", "primitives"]
    for stage in STAGES:
        assert f'kernel = Kernels("{stage}")' in _python(stage)
        assert '#include "common.cuh"' in open(os.path.join(launch.CUDA_DIR, stage + ".cu")).read()
        assert "\n#include" not in launch.source(stage)         # the header's text in its place


def test_kernel_names_are_defined_once():
    names = [n for stage in STAGES for n in _defined(stage)]
    assert len(names) > 30
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_launched_kernels_are_defined_and_defined_kernels_launched():
    defined = {(stage, n) for stage in STAGES for n in _defined(stage)}
    launched = _launched()
    assert {("primitives", "scan_small_bool"), ("primitives", "scan_pass_i64"), ("join", "member_entries")} <= launched
    assert sorted(launched - defined) == []          # a launch of a kernel its stage's source lacks
    assert sorted(defined - launched) == []          # a kernel nothing launches


def test_host_constants_match_the_kernels():
    """Constants the launchers size launches by, which the kernels define too, agree: a summary's
    tiles are cut by ``_SUMMARY_ROUNDS`` rows a thread and staged by ``PASS_OFFSETS_ROUNDS``, a
    scan's by ``_SCAN_ROUNDS`` and ``SCAN_ROUNDS``; its blocks fit ``SCAN_BLOCK_MAX``; the
    summary's launches use ``PASS_BLOCK`` threads."""
    join, primitives = _python("join"), _python("primitives")

    def host(src, name):
        return int(re.search(rf"^{name} = (\d+)$", src, re.M).group(1))

    def define(stage, name):
        return int(re.search(rf"^#define {name} (\d+)$", launch.source(stage), re.M).group(1))

    assert host(join, "_SUMMARY_ROUNDS") == define("join", "PASS_OFFSETS_ROUNDS")
    assert host(primitives, "_SCAN_ROUNDS") == define("primitives", "SCAN_ROUNDS") == define("join", "SCAN_ROUNDS")
    assert host(primitives, "_SCAN_BLOCK") <= define("primitives", "SCAN_BLOCK_MAX")
    blocks = re.findall(r'kernel\("piece_pass(?:_offsets)?"\)\(\(tiles,\), \((\d+),\)', join)
    assert len(blocks) == 2 and {int(b) for b in blocks} == {define("join", "PASS_BLOCK")}


def _parameters():
    """(kernel, parameter declaration) of every kernel of the sources (their one-line macros expanded)."""
    out = []
    for stage in STAGES:
        src = launch.source(stage)
        for name, body in re.findall(r"^#define (\w+) (.+)$", src, re.M):
            src = re.sub(rf"\b{name}\b(?!\()", body, src.replace(f"#define {name} {body}", ""))
        for name, params in re.findall(
                r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\(([^)]*)\)', src):
            out += [(name, " ".join(p.split())) for p in params.split(",") if p.strip()]
    return out


#: The integer types a kernel parameter may have (launch.Launch passes each argument in 8 bytes).
_INTEGER = r"(?:const\s+)?(?:unsigned\s+)?(?:long long|int|char|short|bool)"


def test_kernel_parameters_are_pointers_or_integers():
    """launch.Launch writes each argument as a 64-bit integer (an address or a value), and the
    driver copies a parameter's size from its start: a floating-point or struct parameter would
    read the integer's bits. Every parameter of every kernel is a pointer or an integer."""
    params = _parameters()
    assert len(params) > 200
    value = re.compile(rf"^{_INTEGER}\s+\w+$")
    bad = [(name, p) for name, p in params if "*" not in p and not value.match(p)]
    assert bad == []
    assert not value.match("float x") and not value.match("double y") and value.match("long long n")


def test_every_kernel_fits_the_launch_slots():
    """launch.Launch has ``_SLOTS`` 8-byte slots a thread and refuses a launch of more arguments:
    no kernel of the sources has more parameters than that."""
    counts = {}
    for name, _p in _parameters():
        counts[name] = counts.get(name, 0) + 1
    assert len(counts) > 30 and max(counts.values()) <= launch._SLOTS
