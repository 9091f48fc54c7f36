"""The prefix KV cache across requests: the encoder caches of recent contexts, and the plan for a new context
(which cache to start from, where to resume encoding), least recently used first out.

Exactness: every context is encoded in chunks that start at multiples of `chunk`, and reuse resumes at such a
boundary. Each chunk then sees exactly the inputs and shapes of a cold encode, so a fill served from the cache is
bit-identical to a cold one on the same device (not merely close). A cache whose sliding layers no longer hold the
window before that boundary (`KVCache.rewind_floor`) is not used: the context is encoded cold instead.
"""

from __future__ import annotations

from collections import OrderedDict

from engine.model.kv_cache import KVCache


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the longest common prefix, by binary search over C-speed tuple slice comparisons."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PrefixCache:
    """Up to `size` contexts' KV caches, keyed by their token ids, and (with `max_bytes`) at most that many bytes."""

    def __init__(self, size: int, chunk: int, max_bytes: int | None = None) -> None:
        if size < 0 or chunk <= 0:
            raise ValueError(f"need size >= 0 and chunk > 0, got size={size} chunk={chunk}")
        self.size, self.chunk, self.max_bytes = size, chunk, max_bytes
        self._entries: OrderedDict[tuple[int, ...], KVCache] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: tuple[int, ...]) -> tuple[KVCache, int]:
        """(cache of ids[:n], n): the longest reusable prefix of `ids`, n a chunk boundary (or all of ids when an
        entry is exactly `ids`); (empty cache, 0) when nothing is reusable."""
        best_key, best = None, 0
        for key, cache in self._entries.items():
            n = common_prefix(key, ids)
            if n < len(ids) or len(key) != len(ids):
                n -= n % self.chunk
            if n > best and n >= cache.rewind_floor():
                best_key, best = key, n
        if best_key is None:
            return KVCache(), 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key].truncated(best), best

    def store(self, ids: tuple[int, ...], cache: KVCache) -> None:
        if self.size == 0:
            return
        self._entries[ids] = cache
        self._entries.move_to_end(ids)
        while len(self._entries) > self.size or (
                self.max_bytes is not None and len(self._entries) > 1 and self.nbytes() > self.max_bytes):
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def shrink(self) -> int:
        """After running out of device memory: half the entries (and bytes) from now on, none kept now."""
        self.size = max(1, self.size // 2)
        self.max_bytes = self.max_bytes // 2 if self.max_bytes is not None else None
        self.clear()
        return self.size

    def nbytes(self) -> int:
        """Bytes held (tensors shared between entries counted once)."""
        seen, total = set(), 0
        for cache in self._entries.values():
            for t in (*cache.keys, *cache.values):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in seen:
                    seen.add(ptr)
                    total += t.untyped_storage().nbytes()
        return total
