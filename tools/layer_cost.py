"""What one sandbox costs with the layer this machine gives: ``python tools/layer_cost.py [N]``.

Starts a zygote (hiding nothing, so the root-without-Landlock probe has nothing to refuse), then
N sandboxes one after another, each until it says ready (locked down, nothing of a student's run),
and prints the layer and the time per sandbox (back to back: the sandbox forked ahead is
still locking itself down, so this is the throughput of sandbox starts). Run it in each setting of
``tests/support/settings.py`` to measure each layer of ``attnkit.sandbox.lockdown.without_namespaces`` on one machine, as root, with
a Python every pool uid can read (e.g. a virtualenv of /usr/bin/python3 with the grader's packages)::

    PY=/var/tmp/attnkit-test-venv-.../bin/python
    $PY tests/support/settings.py docker landlock -- $PY tools/layer_cost.py 100      # Docker's default
    $PY tests/support/settings.py docker no-landlock -- $PY tools/layer_cost.py 100   # Docker 20.10
    $PY tests/support/settings.py userns-without-mount TA -- $PY tools/layer_cost.py 100  # Ubuntu 24.04, as TA
"""

from __future__ import annotations

import statistics
import sys
import time

from attnkit.boundary import wire
from attnkit.boundary.policy import Limits
from attnkit.driver.zygote_handle import Zygote


def main(count: int) -> None:
    zygote = Zygote(hide=[], trusted=True)
    limits = Limits()
    times, layer = [], []
    for _ in range(count):
        started = time.perf_counter()
        channel, _pid = zygote.spawn(limits)
        ready = wire.receive(channel)
        times.append(time.perf_counter() - started)
        layer = ready.get("isolation", [])
        channel.close()  # no pause: the next one, forked ahead, is still locking itself down (throughput)
    zygote.close()
    print(f"kind={zygote.isolation.get('kind')} items={','.join(layer)}")
    print(f"{count} sandboxes: mean {statistics.mean(times) * 1000:.1f} ms, median {statistics.median(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
