"""The service's unfinished folders: names in inbound/ seen not yet finished, capped per owner.

``attnkit serve`` remembers each name of inbound/ it saw unfinished (not mode 0777 yet, or no
folder at all) with when, and looks at it again when an event names it or a rescan reaches it
RECHECK_UNFINISHED_SECONDS later. inbound/ is writable by every student, so one of them could make
any number of such names; the names prove nothing, but their owner does (the uid ``exchange.take``
reads with ``fstat`` of the opened folder, or ``lstat`` of a name that is no folder). At most
``cap`` unfinished names per owner are held (issue 48); beyond it a name is *ignored*: not held,
and skipped by rescans. An event naming it still gets it looked at (the chmod 0777 that finishes a
real submission is one), and a lost event (inotify's queue overflowed) clears everything
(``clear``): the next rescan looks at every name again. What is ignored is kept only while rescans
still find it (``rescanned``), so names made and removed do not pile up.
"""

from __future__ import annotations

import math
from collections import Counter


class Unfinished:
    """Unfinished names by owner: when each was last seen, at most ``cap`` per uid."""

    def __init__(self, cap: int, recheck_seconds: float) -> None:
        self.cap = cap
        self.recheck_seconds = recheck_seconds
        self.seen: dict[str, tuple[float, int]] = {}  # held: when last seen (monotonic), its owner
        self.held_by: Counter[int] = Counter()  # names held per owner
        self.ignored: set[str] = set()  # over their owner's cap: rescans skip them
        self.still_ignored: set[str] = set()  # ignored since the last rescan ended, or found by this one
        self.ignored_by: Counter[int] = Counter()  # names ignored per owner, since the start (the log's count)

    def __len__(self) -> int:
        return len(self.seen)

    def hold(self, name: str, owner: int | None, now: float) -> bool:
        """``name`` seen unfinished at ``now``, owned by ``owner`` (None: gone, nothing to hold).
        False when its owner already holds ``cap`` others: it is ignored instead."""
        previous = self.seen.get(name)
        if previous is not None and previous[1] == owner:
            self.seen[name] = (now, previous[1])
            return True
        self.pop(name)
        if owner is None:
            return True
        if self.held_by[owner] >= self.cap:
            self.ignored.add(name)
            self.still_ignored.add(name)
            self.ignored_by[owner] += 1
            return False
        self.seen[name] = (now, owner)
        self.held_by[owner] += 1
        self.ignored.discard(name)
        return True

    def pop(self, name: str, default: object = None) -> object:
        """``name`` is no longer unfinished (taken in, refused, known): forgotten."""
        self.ignored.discard(name)
        held = self.seen.pop(name, None)
        if held is None:
            return default
        self.held_by[held[1]] -= 1
        if self.held_by[held[1]] <= 0:
            del self.held_by[held[1]]
        return held[0]

    def get(self, name: str, default: float = -math.inf) -> float:
        held = self.seen.get(name)
        return default if held is None else held[0]

    def skip(self, name: str, now: float) -> bool:
        """Whether a rescan passes ``name`` by: ignored, or held and seen less than
        ``recheck_seconds`` ago."""
        if name in self.ignored:
            self.still_ignored.add(name)
            return True
        return now - self.get(name) < self.recheck_seconds

    def rescanned(self) -> None:
        """A rescan reached the end of inbound/: what it did not find is no longer ignored."""
        self.ignored, self.still_ignored = self.ignored & self.still_ignored, set()

    def clear(self) -> None:
        """Events were lost: every name is looked at again."""
        self.seen.clear()
        self.held_by.clear()
        self.ignored.clear()
        self.still_ignored.clear()
