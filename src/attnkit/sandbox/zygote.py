"""The untrusted side: a zygote that forks one locked-down sandbox per submission.

The zygote imports torch, numpy, matplotlib and IPython once and never runs student code; it
forks a sandbox on request, so a sandbox starts in milliseconds instead of the seconds a Jupyter
kernel takes. It never imports the hidden tests or the reference solutions, so a sandbox cannot
find them in memory either.

Run as ``python -I -m attnkit.sandbox.zygote FD CONFIG`` where FD is a unix socket to the trusted grader
and CONFIG a JSON object (``hide``: the grader's folders, never part of a sandbox's view). Each
request on FD carries one end of a fresh socketpair (SCM_RIGHTS) and the sandbox settings
(``operations.spawn``); the reply gives the sandbox's pid, which the grader kills when it is done
or out of time. A request ``operations.hold_plan(digest)`` with a memfd instead hands the zygote a
worker's plan (the batch of requests every submission's hidden tests will make, see
``attnkit.grading.sandbox_provider.Plan``): decoded once here, it is in every sandbox forked afterwards, which then
answers ``operations.held_batch(digest)`` without receiving or decoding it again. Every request,
here and on a sandbox's channel, is built and named in ``attnkit.boundary.operations``.

Isolation (``attnkit.sandbox.lockdown.zygote_namespace``): the zygote enters a private mount namespace before its
imports and builds an allowlisted read-only root after them; each sandbox gets new user, mount,
PID, network and IPC namespaces, that root as its whole filesystem, uid 65534 and no
capabilities. Where the kernel allows none of this the zygote says so in its first message and
forks plain processes, which the grader uses only for notebooks it was told to trust. Then
resource limits on memory, CPU, files and processes; stdout/stderr bounded. Requests are served
one at a time: run a cell, call a function, read a variable. Only data goes back
(``attnkit.boundary.wire``).

This module is only the entry point: the pre-import namespace step below, then dispatch. The
jobs live in ``attnkit.sandbox.warm_shell`` (the warm shell), ``attnkit.sandbox.fork_server`` (the fork per request),
``attnkit.sandbox.lockdown.sequence`` (every lock-down step, in order), ``attnkit.sandbox.server`` (a sandbox's
requests), ``attnkit.sandbox.seed_server`` (``--seed``) and ``attnkit.boundary.policy`` (every limit).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    import gc

    # Imports of torch, IPython and matplotlib only add objects: the collections they trigger
    # walk an ever larger heap for nothing (serve_forever collects once, then freezes).
    gc.disable()
    # Before torch and friends start threads: the kernel grants a new user namespace only to a
    # single-threaded process.
    from attnkit.sandbox.lockdown.zygote_namespace import enter_private_namespace

    if sys.argv[1] == "--seed":
        # A seed dies with the grader that started it, even in the middle of its imports.
        import ctypes
        import os
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != int(sys.argv[3]):
            os._exit(0)
        # Ctrl-C reaches the whole process group: the grader handles it and closes us. A zygote a
        # worker starts inherits the worker's ignoring it; the seed's children inherit this.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    MODE = enter_private_namespace()

    # Only now the modules that import torch, numpy, matplotlib and IPython (attnkit.sandbox.warm_shell).
    import socket

    from attnkit.sandbox.fork_server import serve_forever
    from attnkit.sandbox.seed_server import serve_seed

    if sys.argv[1] == "--seed":
        serve_seed(socket.socket(fileno=int(sys.argv[2])), MODE)
    from attnkit.boundary import wire

    CONTROL = socket.socket(fileno=int(sys.argv[1]))
    CONFIG = wire.receive(CONTROL)  # on the socket, never on the command line (see zygote_handle._start_own)
    serve_forever(CONTROL, CONFIG if isinstance(CONFIG, dict) else {}, MODE)
