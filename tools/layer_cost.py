"""What one sandbox costs with the layer this machine gives: ``python tools/layer_cost.py [N]``.

Starts a zygote (hiding nothing, so the root-without-Landlock probe has nothing to refuse), then
N sandboxes one after another, each until it says ready (locked down, nothing of a student's run),
and prints the layer and the time per sandbox (back to back: the sandbox forked ahead is
still locking itself down, so this is the throughput of sandbox starts). Run it under ``tests/confine.py SETTING 0 0 --``
to measure each layer of ``attnkit.nonamespace`` on one machine.
"""

from __future__ import annotations

import statistics
import sys
import time

from attnkit import protocol
from attnkit.policy import Limits
from attnkit.sandbox import Zygote


def main(count: int) -> None:
    zygote = Zygote(hide=[], trusted=True)
    limits = Limits()
    times, layer = [], []
    for _ in range(count):
        started = time.perf_counter()
        channel, _pid = zygote.spawn(limits)
        ready = protocol.receive(channel)
        times.append(time.perf_counter() - started)
        layer = ready.get("isolation", [])
        channel.close()  # no pause: the next one, forked ahead, is still locking itself down (throughput)
    zygote.close()
    print(f"kind={zygote.isolation.get('kind')} items={','.join(layer)}")
    print(f"{count} sandboxes: mean {statistics.mean(times) * 1000:.1f} ms, median {statistics.median(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
