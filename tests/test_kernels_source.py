"""The GPU kernels' source, checked where there is no GPU (CI): a kernel name defined twice
fails the whole module's compilation on the device, and a kernel launched under a name the
source lacks fails at its first use."""

import os
import re

from sgsi.join import kernels

GPU_PY = os.path.join(os.path.dirname(kernels.__file__), "gpu.py")


def _defined():
    return re.findall(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\(', kernels._SOURCE)


def _launched():
    """Kernel names gpu.py launches: literal ones, and those built from a prefix and the scan
    kinds of ``_SCAN_KERNELS``."""
    with open(GPU_PY) as f:
        src = f.read()
    names = set(re.findall(r'kernels\.kernel\("(\w+)"\)', src))
    table = re.search(r"_SCAN_KERNELS = \{(.*?)\}", src, re.S).group(1)
    kinds = re.findall(r':\s*"(\w+)"', table)
    for prefix in re.findall(r'kernels\.kernel\("(\w+_)" \+ kind\)', src):
        names |= {prefix + k for k in kinds}
    return names


def test_kernel_names_are_defined_once():
    names = _defined()
    assert len(names) > 30
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_launched_kernels_are_defined_and_defined_kernels_launched():
    defined, launched = set(_defined()), _launched()
    assert {"scan_small_bool", "scan_pass_i64", "member_entries"} <= launched
    assert sorted(launched - defined) == []          # a launch of a kernel the source lacks
    assert sorted(defined - launched) == []          # a kernel nothing launches


def test_host_constants_match_the_kernels():
    """Constants gpu.py sizes launches by, which the kernels define too, agree: a summary's tiles
    are cut by ``_SUMMARY_ROUNDS`` rows a thread and staged by ``PASS_OFFSETS_ROUNDS``, a scan's by
    ``_SCAN_ROUNDS`` and ``SCAN_ROUNDS``; its blocks fit ``SCAN_BLOCK_MAX``; the summary's launches
    use ``PASS_BLOCK`` threads."""
    with open(GPU_PY) as f:
        src = f.read()

    def host(name):
        return int(re.search(rf"^{name} = (\d+)$", src, re.M).group(1))

    def define(name):
        return int(re.search(rf"^#define {name} (\d+)$", kernels._SOURCE, re.M).group(1))

    assert host("_SUMMARY_ROUNDS") == define("PASS_OFFSETS_ROUNDS")
    assert host("_SCAN_ROUNDS") == define("SCAN_ROUNDS")
    assert host("_SCAN_BLOCK") <= define("SCAN_BLOCK_MAX")
    blocks = re.findall(r'kernels\.kernel\("piece_pass(?:_offsets)?"\)\(\(tiles,\), \((\d+),\)', src)
    assert len(blocks) == 2 and {int(b) for b in blocks} == {define("PASS_BLOCK")}


def _parameters():
    """(kernel, parameter declaration) of every kernel of the source (its one-line macros expanded)."""
    src = kernels._SOURCE
    for name, body in re.findall(r"^#define (\w+) (.+)$", src, re.M):
        src = re.sub(rf"\b{name}\b(?!\()", body, src.replace(f"#define {name} {body}", ""))
    out = []
    for name, params in re.findall(r'extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\(([^)]*)\)',
                                   src):
        out += [(name, " ".join(p.split())) for p in params.split(",") if p.strip()]
    return out


#: The integer types a kernel parameter may have (kernels.Launch passes each argument in 8 bytes).
_INTEGER = r"(?:const\s+)?(?:unsigned\s+)?(?:long long|int|char|short|bool)"


def test_kernel_parameters_are_pointers_or_integers():
    """kernels.Launch writes each argument as a 64-bit integer (an address or a value), and the
    driver copies a parameter's size from its start: a floating-point or struct parameter would
    read the integer's bits. Every parameter of every kernel is a pointer or an integer."""
    params = _parameters()
    assert len(params) > 200
    value = re.compile(rf"^{_INTEGER}\s+\w+$")
    bad = [(name, p) for name, p in params if "*" not in p and not value.match(p)]
    assert bad == []
    assert not value.match("float x") and not value.match("double y") and value.match("long long n")


def test_every_kernel_fits_the_launch_slots():
    """kernels.Launch has ``_SLOTS`` 8-byte slots a thread and refuses a launch of more arguments:
    no kernel of the source has more parameters than that."""
    counts = {}
    for name, _p in _parameters():
        counts[name] = counts.get(name, 0) + 1
    assert len(counts) > 30 and max(counts.values()) <= kernels._SLOTS
