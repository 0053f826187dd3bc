"""A version's partition from another version's, already built in this process over the same base.

Versions U and V differ only at the vertices the net change between them
touches, so V's partition is U's with those lists replaced: U's segments
(base, masked base, in-memory pieces) and degree index batches are carried
into V's store, the ones holding a touched vertex masked again, and the
touched lists at V added as pieces (:meth:`.overlay.VersionView._build`).
The first query at a new version then pays for its own delta, not for every
delta since the base. Pieces pile up over versions: past :data:`MAX_PIECES`
(or the base's segment count) a partition is built from the base again.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .lists import net_events

#: In-memory pieces a derived partition may hold beyond its base segments' count.
MAX_PIECES = 8


def usable(p, base_segments):
    """Whether partition ``p`` of another version may be derived from (not too fragmented)."""
    return p is not None and len(p.seg_ids) - base_segments <= max(MAX_PIECES, base_segments)


def step(store, u, v):
    """(added, removed) edges from version ``u`` to ``v`` (either order) over ``store``'s deltas."""
    lo, hi = sorted((int(u), int(v)))
    added, removed = net_events([(store._deltas[k].inserted, store._deltas[k].deleted) for k in range(lo + 1, hi + 1)])
    return (added, removed) if u < v else (removed, added)


def carry(st, src, p):
    """Partition ``p`` of store ``src`` with its in-memory segments and index batches held by ``st``."""
    seg = [_segment(st, src, int(s)) for s in p.seg_ids.tolist()]             # a loop over segments
    idx = [int(b) if b < st._n_base_index else st._add_index(p.key, *src._vindex[b])[0]
           for b in p.idx_batches.tolist()]                                   # and index batches
    return dataclasses.replace(p, seg_ids=np.array(seg, np.int64), idx_batches=np.array(idx, np.int64))


def _segment(st, src, sid):
    if sid < st._n_base_segments:
        return sid
    groups, ci, base, verts, ng, ne = src._virtual[sid]
    with st._lock:
        new = st._next_segment
        st._next_segment += 1
        st._virtual[new] = (groups, ci, base, verts, ng, ne)
    return new
