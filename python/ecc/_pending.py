# SPDX-License-Identifier: Apache-2.0
"""The references that keep every save source and load destination alive until
poll has reported its completion (the caching allocator of torch would otherwise
hand the memory to the next tensor while the copy still reads or writes it)."""

import threading
from collections import deque

from ._guard import held

_NONE = object()  # no load of this id in flight (None is an owner like any other)


class Pending:
    """Saves in submission order (completions come FIFO and name the key; the key
    is None for a token reserved elsewhere), loads by transfer id (a batch's
    completions need not come in the order its entries were given). A load's
    owners are whatever keeps its destination alive (a tuple, or the tensor
    itself); a transfer id that several loads in flight share maps to a deque
    of theirs, oldest first, and one that a single load has maps to its owners
    directly, so that a step of distinct ids is added in one dict update."""

    def __init__(self):
        self._lock = threading.RLock()
        self._saves = deque()  # (key bytes or None, owners)
        self._loads = {}  # transfer id -> owners, or a deque of owners

    def __len__(self):
        return held(self._lock, self._count)

    def _count(self):
        return len(self._saves) + sum(len(v) if type(v) is deque else 1
                                      for v in self._loads.values())

    def add_saves(self, items):
        held(self._lock, self._add_saves, items)

    def _add_saves(self, items):
        self._saves.extend(items)

    def drop_last_saves(self, n):
        """Undo add_saves of a call the C library refused (the submit lock is
        held, so they are still the newest)."""
        held(self._lock, self._drop_saves, n)

    def _drop_saves(self, n):
        for _ in range(n):
            self._saves.pop()

    def add_loads(self, tids, owners):
        """The owners of each load of a step: tids[i]'s are owners[i]."""
        held(self._lock, self._add_loads, tids, owners)

    def _add_loads(self, tids, owners):
        loads = self._loads
        if len(set(tids)) == len(tids) and loads.keys().isdisjoint(tids):
            loads.update(zip(tids, owners))
            return
        for tid, own in zip(tids, owners):
            have = loads.get(tid, _NONE)
            if have is _NONE:
                loads[tid] = own
            elif type(have) is deque:
                have.append(own)
            else:
                loads[tid] = deque((have, own))

    def drop_last_loads(self, tids):
        """Undo add_loads of a call the C library refused: its loads are the
        newest of their ids."""
        held(self._lock, self._drop_loads, tids)

    def _drop_loads(self, tids):
        loads = self._loads
        for tid in reversed(tids):
            have = loads[tid]
            if type(have) is deque:
                have.pop()
                if have:
                    continue
            del loads[tid]

    def _take_save(self, key):
        if self._saves and self._saves[0][0] in (key, None):
            return self._saves.popleft()[1]
        for i, (k, owners) in enumerate(self._saves):
            if k == key:
                del self._saves[i]
                return owners
        return None

    def _take_load(self, transfer_id):
        loads = self._loads
        have = loads.get(transfer_id, _NONE)
        if have is _NONE:
            return None
        if type(have) is not deque:
            del loads[transfer_id]
            return have
        owners = have.popleft()
        if not have:
            del loads[transfer_id]
        return owners

    def release(self, records, save_dir):
        """Take the owners of polled completions; the caller drops them outside
        the lock (freeing a tensor may run arbitrary code)."""
        return held(self._lock, self._take, records, save_dir)

    def _take(self, records, save_dir):
        return [self._take_save(r.key) if r.direction == save_dir
                else self._take_load(r.transfer_id) for r in records]

    def clear(self):
        return held(self._lock, self._swap)

    def _swap(self):
        saves, loads = self._saves, self._loads
        self._saves, self._loads = deque(), {}
        return saves, loads

    def after_fork_in_child(self):
        """A lock a parent thread held at fork stays held in the child."""
        self._lock = threading.RLock()
