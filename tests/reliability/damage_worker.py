"""Run by test_damaged_store.py in a subprocess with an address-space limit.

Damages copies of a store at random (fixed seed, time-bounded) and queries
each copy; prints one JSON line per trial: what was done to which file, and
what came of it. A damaged file must never crash the process, never make it
allocate without bound, and never raise anything but a StoreError naming it.
"""

import json
import os
import random
import shutil
import sys
import time
import traceback

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]

import sgsi  # noqa: E402
from sgsi.errors import SgsiError, StoreError  # noqa: E402
from sgsi.storage.store import verify_files  # noqa: E402


def damage(rng, path):
    data = bytearray(open(path, "rb").read())
    how = rng.choice(["flip", "flip", "run", "zero", "truncate", "append", "swap"])
    if how == "flip":
        for _ in range(rng.choice([1, 2, 8])):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif how == "run":
        i = rng.randrange(len(data))
        for k in range(i, min(len(data), i + rng.randrange(1, 64))):
            data[k] = rng.randrange(256)
    elif how == "zero":
        i = rng.randrange(len(data))
        data[i:i + rng.randrange(1, 256)] = bytes(len(data[i:i + rng.randrange(1, 256)]))
    elif how == "truncate":
        data = data[:rng.randrange(len(data))]
    elif how == "append":
        data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    elif how == "swap":
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        data[i:j] = data[i:j][::-1]
    with open(path, "wb") as f:
        f.write(bytes(data))
    return how


def main():
    base, work, seed, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    patterns = json.loads(sys.argv[5])
    budget = sys.argv[6]
    at_least = int(sys.argv[7]) if len(sys.argv) > 7 else 0     # trials, however long they take
    with sgsi.open(base) as g:
        ref = [g.count(p, device="cpu", memory_budget=budget) for p in patterns]
        ref_rows = g.match(patterns[1], device="cpu", memory_budget=budget).read_all().num_rows
    names = sorted(n for n in os.listdir(base) if n != "manifest.json")
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    trial = 0
    while time.monotonic() < deadline or trial < at_least:
        name = names[trial % len(names)]
        copy = os.path.join(work, f"t{trial}.sgsi")
        shutil.copytree(base, copy)
        before = open(os.path.join(copy, name), "rb").read()
        how = damage(rng, os.path.join(copy, name))
        changed = open(os.path.join(copy, name), "rb").read() != before
        rec = {"trial": trial, "file": name, "how": how, "changed": changed}
        try:
            with sgsi.open(copy) as g:
                got = [g.count(p, device="cpu", memory_budget=budget) for p in patterns]
                reader, failure = g._match(patterns[1], device="cpu", memory_budget=budget)
                try:
                    rows = reader.read_all().num_rows
                except Exception as e:      # noqa: BLE001
                    sgsi.join.query.reraise_stream_error(failure, e)
                    raise
            rec["outcome"] = "same" if (got == ref and rows == ref_rows) else "different"
        except StoreError as e:
            rec["outcome"] = "refused" if name in str(e) else "refused-unnamed"
            rec["message"] = str(e)[:300]
        except SgsiError as e:
            rec["outcome"] = "other-sgsi-error"
            rec["message"] = f"{type(e).__name__}: {str(e)[:300]}"
        except BaseException as e:     # noqa: BLE001 - what we are looking for
            rec["outcome"] = "crash"
            rec["message"] = f"{type(e).__name__}: {str(e)[:300]}"
            rec["where"] = traceback.format_exc()[-1500:]
        try:
            verify_files(copy)
            rec["verify"] = "passes"
        except StoreError as e:
            rec["verify"] = "names the file" if name in str(e) else f"other: {e}"
        print(json.dumps(rec), flush=True)
        shutil.rmtree(copy)
        trial += 1


if __name__ == "__main__":
    main()
