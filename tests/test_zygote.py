"""The zygote's preparations that make each sandbox cheaper, checked on a real zygote."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import pytest

from attnkit.sandbox import Zygote


def kernel_collapses() -> bool:
    """Whether this kernel does MADV_COLLAPSE (Linux 6.1+, THP not disabled)."""
    enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not enabled.is_file() or "[never]" in enabled.read_text():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    size = 8 << 20
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private, like a heap
    region.write(b"x" * size)
    view = ctypes.c_char.from_buffer(region)
    start = -(-ctypes.addressof(view) // (2 << 20)) * (2 << 20)
    done = libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(2 << 20), 25) == 0
    del view
    region.close()
    return done


def anon_huge_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


@pytest.mark.skipif(not kernel_collapses(), reason="this kernel cannot collapse memory into huge pages")
def test_the_zygotes_heap_is_in_huge_pages() -> None:
    """Is most of the zygote's private memory (torch's import leaves ~140 MB) backed by 2 MiB
    pages, so that each fork copies one page-table entry per 2 MiB instead of 512?"""
    zygote = Zygote()
    try:
        assert anon_huge_kb(zygote.process.pid) > 50_000
    finally:
        zygote.close()
