"""The seed's server (``python -I -m attnkit.sandbox.zygote --seed``, started by ``attnkit.driver.seed``): warm
once, then fork each worker a zygote that serves it as one started on its own would.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import time

from IPython.core.interactiveshell import InteractiveShell

from attnkit.boundary import wire
from attnkit import cpu_account
from attnkit.sandbox.warm_shell import warm_shell
from attnkit.sandbox.fork_server import collapse_into_huge_pages, serve_forever
from attnkit.sandbox.lockdown.zygote_namespace import Mode, own_mount_namespace
from attnkit.sandbox.lockdown.namespace_steps import die_with_parent


def serve_seed(requests: socket.socket, mode: Mode) -> None:
    """``--seed`` (``attnkit.driver.seed``): warm once, then fork a zygote for each request on
    ``requests`` (one end of a worker's socketpair, by SCM_RIGHTS). Each child receives its
    worker's configuration on that socket and serves it as a zygote started on its own would.
    When the grader closes ``requests``: wait for the children to end, kill what is left, exit."""
    die_with_parent()
    shell = warm_shell()
    gc.collect()
    gc.freeze()
    if os.environ.get("ATTNKIT_HUGE_PAGES", "1") != "0":
        # Shared with every child: the parts a child never writes stay one copy.
        collapse_into_huge_pages()
    children: set[int] = set()
    seed = os.getpid()
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(requests, 64, 1)
        except OSError:
            message, fds = b"", []
        children -= _reaped(children)
        if not message:
            break
        if not fds:
            continue
        pid = os.fork()
        if pid == 0:
            # Dies with the seed from now on (a fork does not inherit it), even before its worker's
            # configuration arrives: then its worker, at the end of a closed socket, starts its own.
            die_with_parent()
            if os.getppid() != seed:
                os._exit(0)
            requests.close()
            _serve_from_seed(socket.socket(fileno=fds[0]), mode, shell)
        os.close(fds[0])
        children.add(pid)
    deadline = time.monotonic() + 5
    while children and time.monotonic() < deadline:
        children -= _reaped(children)
        time.sleep(0.01)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    cpu_account.own("seed")
    os._exit(0)


def _reaped(children: set[int]) -> set[int]:
    ended = set()
    for pid in children:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                ended.add(pid)
        except ChildProcessError:
            ended.add(pid)
    return ended


def _serve_from_seed(control: socket.socket, mode: Mode, shell: InteractiveShell) -> None:
    """In the seed's child: never returns into the seed's loop."""
    try:
        try:
            config = wire.receive(control)
        except (OSError, wire.ProtocolError):
            os._exit(0)  # its worker went away before configuring it
        if not isinstance(config, dict):
            os._exit(1)
        serve_forever(control, config, own_mount_namespace(mode), shell)
    finally:
        os._exit(1)
