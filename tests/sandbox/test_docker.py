"""Does `attnkit grade` isolate a hostile class inside a real Docker container, as root, under the
daemon's default seccomp profile and capabilities (how Gradescope and most CI grade)?

Debian's docker.io (20.10.24: its default profile denies the namespace calls, clone3 gives ENOSYS;
measured here, it lets landlock_create_ruleset through, so this is the "root, Landlock available"
case; tests/support/settings.py's landlock=False covers a profile that denies it) is installed by apt when missing, with
debootstrap. A private dockerd is started with its own data root, exec root, pidfile and socket,
no bridge and no iptables; containers run with `--network none`. No registry can be reached, so the
image is a debootstrap'd Debian bookworm minbase rootfs (`docker import`), whose tarball is cached
in ~/.cache/attnkit-tests between runs. The checkout (with its .venv) and the interpreter's prefix
are mounted read-only at their host paths; only the class's folder is writable.

The class: a correct bystander, the release's stubs, a notebook that execs the course's reference
and one that writes into OUT and reads a peer's notebook. Each run must see: the bystander scores
100, the theft no more than the stubs, nothing written into OUT, and the isolation recorded is the
one a container allows (no pivot_root, so no allowlisted root of mounts).

Until the no-namespace layer of issue 22 is in the checkout, the grader refuses there with advice
that names a sysctl; the test then xfails, saying so. That message is what the layer removes (a
container never gets sysctl advice), so the xfail cannot hide the layer's own failures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from attacks import ASSIGNMENT, RELEASE, ROOT, SOLUTION, load, with_cells, write

if not sys.platform.startswith("linux") or os.geteuid() != 0:
    pytest.skip("starts a Docker daemon: needs root on Linux (CI runs as root)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.root, pytest.mark.e2e]

CACHE = Path.home() / ".cache" / "attnkit-tests"
ROOTFS_TAR = CACHE / "bookworm-minbase.tar"
MIRROR = "http://deb.debian.org/debian"
# Shared libraries the interpreter's extension modules and torch load, beyond minbase's.
ROOTFS_PACKAGES = ["libssl3", "libffi8", "libsqlite3-0", "libbz2-1.0", "liblzma5", "libreadline8", "libncursesw6", "libgomp1", "libstdc++6"]
IMAGE = "attnkit-test"
LIMITS = ["--cell-timeout", "20", "--call-timeout", "10", "--memory-mb", "1024"]


def ensure_packages() -> None:
    """docker.io and debootstrap, from Debian's archive, as the Makefile's `browser` target does for chromium."""
    if shutil.which("dockerd") and shutil.which("debootstrap"):
        return
    if not shutil.which("apt-get"):
        pytest.skip("no dockerd/debootstrap and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "docker.io", "debootstrap"], check=True, env=env, capture_output=True)


def rootfs_tarball() -> Path:
    """A Debian bookworm minbase rootfs as a tarball, built once and kept in the cache."""
    if ROOTFS_TAR.is_file():
        return ROOTFS_TAR
    CACHE.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="attnkit-rootfs-", dir="/var/tmp"))
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(ROOTFS_PACKAGES)}", "bookworm", str(build / "rootfs"), MIRROR],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        partial = ROOTFS_TAR.with_suffix(".part")
        subprocess.run(["tar", "-C", str(build / "rootfs"), "-cf", str(partial), "."], check=True)
        partial.rename(ROOTFS_TAR)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return ROOTFS_TAR


class Docker:
    """A private dockerd and the client that talks to it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "docker.sock"
        self.client = shutil.which("docker", path="/usr/bin") or shutil.which("docker") or "docker"

    def start(self) -> None:
        (self.folder / "daemon.json").write_text("{}")  # not the machine's /etc/docker/daemon.json
        self.log = open(self.folder / "dockerd.log", "wb")
        self.process = subprocess.Popen(
            [
                "dockerd",
                "--config-file",
                str(self.folder / "daemon.json"),
                "--data-root",
                str(self.folder / "data"),
                "--exec-root",
                str(self.folder / "exec"),
                "--pidfile",
                str(self.folder / "dockerd.pid"),
                "-H",
                f"unix://{self.socket}",
                "--bridge=none",
                "--iptables=false",
                "--ip6tables=false",
                "--ip-masq=false",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError("dockerd exited: " + (self.folder / "dockerd.log").read_text()[-3000:])
            if self.socket.exists() and self.run("version", check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError("dockerd did not answer: " + (self.folder / "dockerd.log").read_text()[-3000:])

    def run(self, *args: str, check: bool = True, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.client, "-H", f"unix://{self.socket}", *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            **kwargs,
        )

    def stop(self) -> None:
        # dockerd stops its containers and its own containerd on SIGTERM.
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait()
        self.log.close()
        subprocess.run(["umount", "-R", "-l", str(self.folder / "data")], capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(self.folder / "exec")], capture_output=True)


@pytest.fixture(scope="module")
def docker():
    ensure_packages()
    tarball = rootfs_tarball()
    daemon = Docker(Path(tempfile.mkdtemp(prefix="attnkit-docker-", dir="/tmp")))
    daemon.start()
    try:
        with open(tarball, "rb") as rootfs:
            subprocess.run([daemon.client, "-H", f"unix://{daemon.socket}", "import", "-", IMAGE], stdin=rootfs, check=True, capture_output=True)
        yield daemon
    finally:
        daemon.stop()
        shutil.rmtree(daemon.folder, ignore_errors=True)


def hostile_class(submitted: Path, out: Path) -> None:
    reference = next((ROOT / "autograder").rglob("reference.py"))
    write(load(SOLUTION), submitted / "bystander" / ASSIGNMENT)
    write(load(RELEASE), submitted / "stub" / ASSIGNMENT)
    write(with_cells(load(RELEASE), [f"exec(open({str(reference)!r}).read(), globals())\n"]), submitted / "exec_reference" / ASSIGNMENT)
    trespass = (
        "import pathlib\n"
        f"for target in [pathlib.Path({str(out)!r}) / 'planted.txt', pathlib.Path({str(out)!r}) / 'students' / 'planted.txt']:\n"
        "    try:\n        target.write_text('planted')\n    except OSError:\n        pass\n"
        "import json\n"
        f"try:\n    peer = json.load(open({str(submitted / 'bystander' / ASSIGNMENT / 'attention.ipynb')!r}))\n"
        "except OSError:\n    peer = {'cells': []}\n"
        "for cell in peer['cells']:\n"
        "    if cell['cell_type'] == 'code':\n"
        "        try:\n            exec(cell['source'], globals())\n        except Exception:\n            pass\n"
    )
    write(with_cells(load(RELEASE), [trespass]), submitted / "trespasser" / ASSIGNMENT)


def test_grading_a_hostile_class_in_docker_default(docker: Docker, tmp_path: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="attnkit-docker-class-", dir="/var/tmp"))
    try:
        submitted, out = work / "submitted", work / "out"
        hostile_class(submitted, out)
        out.mkdir()
        prefix = Path(sys.base_prefix).resolve()
        python = ROOT / ".venv" / "bin" / "python"
        container = docker.run(
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            "0:0",
            "-v",
            f"{ROOT}:{ROOT}:ro",
            "-v",
            f"{prefix}:{prefix}:ro",
            "-v",
            f"{work}:{work}",
            "-e",
            "HOME=/root",
            "-e",
            "LANG=C.UTF-8",
            "-w",
            "/",
            # The grader's Python lives under /root here (pyenv's), which Debian's image keeps 0700: the
            # sandbox's pool uid could not read it, and the grader refuses, saying to install Python
            # outside root's home or to open it (as a course's image, with Python in /usr, needs no such step).
            IMAGE,
            "/bin/sh",
            "-c",
            'chmod 755 /root && exec "$@"',
            "sh",
            str(python),
            "-m",
            "attnkit.cli",
            "grade",
            "--submitted",
            str(submitted),
            "--out",
            str(out),
            "--jobs",
            "2",
            "--quiet",
            "--force",
            *LIMITS,
            check=False,
            timeout=900,
        )
        inspect = docker.run("info", "--format", "{{json .SecurityOptions}}", check=False).stdout.strip()
        results = {path.parent.parent.name: json.loads(path.read_text()) for path in out.glob("students/*/*/results.json")}
        print(
            f"\n[docker] security options {inspect}; exit {container.returncode}; "
            + ", ".join(f"{sid} {r['score']:g} ({r.get('isolation')}: {r.get('sandbox', {}).get('isolation')})" for sid, r in sorted(results.items()))
            + "\n"
            + container.stderr[-2000:],
            file=sys.stderr,
        )
        if container.returncode == 2 and not results and "sysctl" in container.stderr:
            pytest.xfail(
                "the no-namespace sandbox layer (issue 22) is not in this checkout: the grader refuses in Docker's default profile, "
                "advising a sysctl: " + container.stderr.strip()[-400:]
            )
        assert container.returncode in (0, 1), container.stderr[-3000:]
        assert set(results) == {"bystander", "stub", "exec_reference", "trespasser"}, sorted(results)
        assert results["bystander"]["score"] == 100, results["bystander"]["tests"]
        baseline = results["stub"]["score"]
        for thief in ("exec_reference", "trespasser"):
            assert results[thief]["score"] <= baseline, (thief, results[thief]["score"], baseline)
        assert not list(out.rglob("planted.txt")), "a notebook wrote into OUT"
        for student_id, record in results.items():
            obtained = record["sandbox"]["isolation"]
            assert record["isolation"] == "isolated", (student_id, obtained)
            # Docker's default profile denies pivot_root: the record must not claim a root of mounts.
            assert "allowlisted-root" not in obtained, (student_id, obtained)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_settings_harness_matches_the_real_container(docker: Docker) -> None:
    """tests/support/settings.py's Docker stand-in against the real thing: the same probe (raw syscalls) in a
    container of this daemon and under `docker_default` must see the same answers."""
    from settings import docker_default
    from test_settings_harness import PROBE, SYSCALLS, probe

    prefix = Path(sys.base_prefix).resolve()
    inside = docker.run(
        "run", "--rm", "--network", "none", "-v", f"{prefix}:{prefix}:ro", IMAGE, str(prefix / "bin" / "python3"), "-c", PROBE, json.dumps(SYSCALLS)
    )
    real = json.loads(inside.stdout)
    stand_in = probe(lambda command: docker_default(command, landlock=real["landlock_abi"] >= 1))
    print(f"\n[docker] the daemon's container: {real}", file=sys.stderr)
    compared = [
        "uid",
        "caps",
        "no_new_privs",
        "seccomp",
        "unshare_user",
        "unshare_mount",
        "setns",
        "mount",
        "umount2",
        "clone_newuser",
        "clone_newpid",
        "clone_plain",
        "clone3",
        "landlock_abi",
        "userns_then_mount",
    ]
    assert {key: stand_in[key] for key in compared} == {key: real[key] for key in compared}
