"""Device scratch: why does cudaHostRegister hang on a 1GB-built store's segment files?
Each attempt runs in its own child with a 30 s limit."""
import os, sys, time, subprocess
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
if len(sys.argv) == 1:
    import gen, sgsi
    gdir = gen.cached_rmat("/tmp/data", 10_000_000, "watdiv")
    for budget in ("64MB", "1GB"):
        path = f"/tmp/data/s-{budget}.sgsi"
        if os.path.exists(path):
            continue
        t = time.perf_counter()
        g = sgsi.build(path, edges=os.path.join(gdir, "edges.parquet"), vertices=os.path.join(gdir, "vertices.parquet"),
                       memory_budget=budget, force=True)
        g.close()
        print(budget, "built", round(time.perf_counter() - t, 1), "s;", {f: os.path.getsize(os.path.join(path, f)) for f in ("pcsr_groups.arrow", "pcsr_ci.arrow")}, flush=True)
    for budget, mode in (("64MB", "plain"), ("1GB", "mmap_py"), ("1GB", "plain"), ("1GB", "prefault"), ("64MB", "plain")):
        if True:
            try:
                r = subprocess.run([sys.executable, __file__, budget, mode], capture_output=True, text=True, timeout=20)
                print(budget, mode, "->", r.stdout.strip().replace("\n", " | "), r.stderr.strip()[-300:], flush=True)
            except subprocess.TimeoutExpired as e:
                out = e.stdout or ""
                out = out.decode() if isinstance(out, bytes) else out
                print(budget, mode, "-> HUNG (20 s) after:", out.strip().replace("\n", " | "), flush=True)
    sys.exit()
budget, mode = sys.argv[1], sys.argv[2]
import mmap
import numpy as np, pyarrow as pa, cupy as cp
print("start", flush=True)
cp.cuda.runtime.getDeviceCount(); cp.zeros(1)
print("cuda up", flush=True)
path = f"/tmp/data/s-{budget}.sgsi/pcsr_ci.arrow"
size = os.path.getsize(path)
if mode == "mmap_py":
    f = open(path, "rb"); mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    base = np.frombuffer(mm, np.uint8).ctypes.data
else:
    print("pyarrow map", flush=True)
    mm = pa.memory_map(path, "r"); buf = mm.read_buffer(size); base = buf.address
    print("mapped", flush=True)
block = 32 << 20
n = min(block, size)
off = 0 if size <= block else block          # a block in the middle of the file where there is one
n = min(block, size - off)
print("file", size, "base % 4096 =", base % 4096, "register", off, n, flush=True)
if mode in ("prefault", "whole_prefault"):
    import ctypes
    lo, hi = (0, size) if mode == "whole_prefault" else (off, off + n)
    view = (ctypes.c_uint8 * (hi - lo)).from_address(base + lo)
    t = time.perf_counter(); s = int(np.frombuffer(view, np.uint8)[::4096].sum()); print("prefault", round(time.perf_counter() - t, 4), flush=True)
if mode == "populate":
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    page = base + off - (base + off) % 4096
    r = libc.madvise(ctypes.c_void_p(page), ctypes.c_size_t(n + (base + off) % 4096), 22)   # MADV_POPULATE_READ
    print("madvise", r, ctypes.get_errno(), flush=True)
t = time.perf_counter()
cp.cuda.runtime.hostRegister(base + off, n, 8)
print("registered", round(time.perf_counter() - t, 4), flush=True)
dev = cp.empty(n, cp.uint8); s = cp.cuda.Stream(non_blocking=True)
e0 = s.record(); cp.cuda.runtime.memcpyAsync(dev.data.ptr, base + off, n, 1, s.ptr); e1 = s.record(); e1.synchronize()
print("copy GB/s", round(n / cp.cuda.get_elapsed_time(e0, e1) / 1e6, 1), flush=True)
cp.cuda.runtime.hostUnregister(base + off); print("unregistered", flush=True)
