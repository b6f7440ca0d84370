"""The kit's JupyterLab extension (labextension/, issue 51) in a student's JupyterLab on a real hub.

One JupyterHub (tests/service/test_service_hub.py's ``running``: configurable-http-proxy, the
course released, ``attnkit serve --hub`` as its managed service, one graded feedback per hour) whose
users are unix users of the host, each spawned by JupyterHub's LocalProcessSpawner into their own
JupyterLab (this venv's, with nbgrader's lab extensions and the kit's, installed by ``make
labextension``). Four students: on the exchange channel a correct one and a mistaken one (no
``ATTNKIT_SERVICE_URL``: the extension finds their pages in the exchange, as the student); on the
``--hub`` channel the same two answers (``ATTNKIT_SERVICE_URL`` set: it asks the service with the
server's own token).

In headless Chromium each student opens the fetched notebook, reads the attempts line (one
feedback left), submits from nbgrader's Assignment List, gets the notification, opens the page in
the panel beside the notebook, and sees the marks: the mistaken student's ``scaled_attention`` cell
carries the diagnosis (``mask_by_multiplying``) and its chapter section, the correct student's
cells no lost points and no diagnosis; the attempts line then says none is left and when the next
comes; the notebook file is byte for byte what it was. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket
from commands import BIN, ROOT
from devtools import Browser
from test_nbgrader_exchange import LENT, as_user
from test_service_hub import ASSIGNMENT, CORRECT, MISTAKE, WAIT, Hub, log_in, running
from ta_machine import lend_to_others

pytestmark = [pytest.mark.e2e, pytest.mark.root, pytest.mark.browser]

NOTEBOOK = f"{ASSIGNMENT}/attention.ipynb"
# The notebook's panel in the page, and its model as JupyterLab would save it.
PANEL = f"[...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === '{NOTEBOOK}')"
# (its cells: JupyterLab itself writes the notebook's language_info once the kernel is up)
MODEL = f"JSON.stringify({PANEL}.context.model.toJSON().cells)"
ARTIFACTS = ROOT / "tests" / "artifacts"


class LabHub(Hub):
    """The hub of test_service_hub.py with unix users spawned into their own JupyterLab."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        suffix = f"{os.getpid() % 100000}"
        # (channel, answers) -> user: ak51 + e/h (exchange, hub) + c/m (correct, mistaken)
        self.students = {(channel, answers): f"ak51{channel[0]}{answers[0]}{suffix}" for channel in ("exchange", "hub") for answers in ("correct", "mistaken")}
        self.homes = {user: base / "home" / user for user in self.students.values()}

    def users(self) -> list[str]:
        return [*self.students.values(), self.ta]

    def config(self) -> str:
        hub_users = [user for (channel, _answers), user in self.students.items() if channel == "hub"]
        commands = {
            user: lend_to_others(["runuser", "-u", user, "--", str(BIN / "jupyterhub-singleuser"), "--LabApp.expose_app_in_browser=True"], LENT)
            for user in self.students.values()
        }
        return (
            super().config()
            + f"""
from jupyterhub.spawner import LocalProcessSpawner

class LentSpawner(LocalProcessSpawner):
    # The student's server is started by runuser inside ta_machine.lend_to_others's namespace (a checkout
    # only root can reach is lent to it); the hub stays root until runuser drops to the student.
    def make_preexec_fn(self, name):
        import os, pwd
        home = pwd.getpwnam(name).pw_dir
        return lambda: os.chdir(home)  # as the spawner's own does: nbgrader's Assignment List reads its config from there

COMMANDS = {commands!r}
HUB_USERS = {hub_users!r}

def before_spawn(spawner):
    spawner.cmd = COMMANDS[spawner.user.name]
    if spawner.user.name in HUB_USERS:  # docs/hub.md's line: the --hub channel
        spawner.environment = {{**spawner.environment, "ATTNKIT_SERVICE_URL": {self.service!r}}}

c.JupyterHub.spawner_class = LentSpawner
c.JupyterHub.load_roles[1]["scopes"].append("admin:servers")  # the test starts each student's server
c.Spawner.pre_spawn_hook = before_spawn
c.Spawner.notebook_dir = {str(self.base / "home" / "{username}")!r}
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 180
c.Spawner.start_timeout = 180
"""
        )


@pytest.fixture(scope="module")
def lab() -> Iterator[LabHub]:
    created: list[str] = []

    class Made(LabHub):
        def __init__(self, base: Path) -> None:
            super().__init__(base)
            base.chmod(0o755)  # the students reach their homes and the exchange below it
            (base / "home").mkdir(mode=0o755)
            for user in self.students.values():
                home = self.homes[user]
                subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", user], check=True, capture_output=True)
                created.append(user)
                # JupyterLab's own "get news?" toast would sit over the kit's: answered for them.
                settings = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
                settings.mkdir(parents=True)
                (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
                subprocess.run(["chown", "-R", f"{user}:{user}", str(home / ".jupyter")], check=True)
                (home / "nbgrader_config.py").write_text(f"c = get_config()\nc.Exchange.root = {str(self.exchange)!r}\nc.CourseDirectory.course_id = 'ch19'\n")

    try:
        with running(Made) as setup:
            setup.exchange.chmod(0o777)
            for (_channel, answers), user in setup.students.items():
                home = setup.homes[user]
                as_user(user, home, str(BIN / "nbgrader"), "fetch_assignment", ASSIGNMENT)
                notebook = home / NOTEBOOK
                notebook.write_bytes((CORRECT if answers == "correct" else MISTAKE).read_bytes())
                shutil.chown(notebook, user, user)
            yield setup
    finally:
        for user in created:
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
            subprocess.run(["userdel", "--remove", user], capture_output=True)


def framed_page(profile: Path, timeout: float = WAIT) -> str:
    """The HTML the panel's iframe shows. The frame is sandboxed (an opaque origin: no script of
    JupyterLab can read it) and Chromium runs it out of process, so it is asked through its own
    DevTools target, as a reader's eyes would see it."""
    port = int((profile / "DevToolsActivePort").read_text().split()[0])
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=60) as answer:
            frames = [t for t in json.loads(answer.read()) if t.get("type") == "iframe" and "/attnkit-lab/page" in t.get("url", "")]
        if frames:
            frame = websocket.create_connection(frames[0]["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
            try:
                expression = "document.querySelector('#score') ? document.documentElement.outerHTML : ''"
                frame.send(json.dumps({"id": 1, "method": "Runtime.evaluate", "params": {"expression": expression, "returnByValue": True}}))
                while (message := json.loads(frame.recv())).get("id") != 1:
                    pass
            finally:
                frame.close()
            shown = str(message.get("result", {}).get("result", {}).get("value") or "")
            if shown:
                return shown
        assert time.monotonic() < deadline, f"the panel never showed the page: {frames}"
        time.sleep(0.5)


def wait_until(browser: Browser, expression: str, timeout: float = WAIT) -> Any:
    """The value of a script in the page once it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = browser.evaluate(expression)
        if value:
            return value
        assert time.monotonic() < deadline, f"never true: {expression}\n{browser.html()[-3000:]}"
        time.sleep(0.3)


ATTEMPTS = "document.querySelector('.attnkit-attempts:not([hidden])')"


def start_server(lab: LabHub, user: str) -> None:
    """The student's server, started through the hub's REST API (a browser would press "Start"), once it is ready."""
    lab.api("POST", f"users/{user}/server", {})
    deadline = time.monotonic() + WAIT
    while not lab.api("GET", f"users/{user}")["servers"].get("", {}).get("ready"):
        assert time.monotonic() < deadline, lab.log.read_text(errors="replace")[-5000:]
        time.sleep(0.5)


def run_student(lab: LabHub, channel: str, answers: str, tmp_path: Path) -> dict[str, Any]:
    """One student's loop in the browser; what was seen."""
    user = lab.students[(channel, answers)]
    notebook = lab.homes[user] / NOTEBOOK
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    start_server(lab, user)
    browser = Browser(tmp_path / f"profile-{user}", tmp_path / f"chromium-{user}.log")
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1, mobile=False)
        log_in(browser, lab, user, f"{lab.url}/user/{user}/lab/tree/{NOTEBOOK}")
        wait_until(browser, "document.querySelector('.jp-Notebook .jp-Cell') !== null")
        # Before the submit: one feedback left in the window.
        left_before = wait_until(browser, f"{ATTEMPTS} && {ATTEMPTS}.dataset.left")
        model_before = wait_until(browser, f"{PANEL} && {PANEL}.context.isReady && {MODEL}")
        line_before = browser.evaluate(f"{ATTEMPTS}.textContent")
        # Submit from nbgrader's Assignment List.
        browser.evaluate("window.jupyterapp.commands.execute('nbgrader:open-assignment-list')")
        button = "#fetched_assignments_list .list_item .item_status button"
        wait_until(browser, f"[...document.querySelectorAll('{button}')].some(b => b.innerText === 'Submit')")
        browser.click(button)
        # The notification of THAT submission, then its page in the panel beside the notebook.
        toast = wait_until(browser, "[...document.querySelectorAll('.jp-Notification-Toast-info .jp-toast-message')].map(m => m.textContent).join('|')")
        # Its action, by its words (JupyterLab may show other toasts beside it).
        mark_action = "b => b.textContent.includes('打开反馈') && b.setAttribute('data-test-open', '') === undefined"
        wait_until(browser, f"[...document.querySelectorAll('.jp-toast-button')].some({mark_action})")
        browser.evaluate("document.querySelector('.jp-toast-button[data-test-open]').click()")  # the toast may still slide in under a mouse
        wait_until(browser, "document.querySelector('.attnkit-feedback iframe') !== null")
        framed = framed_page(tmp_path / f"profile-{user}")
        sandbox = browser.evaluate("document.querySelector('.attnkit-feedback iframe').getAttribute('sandbox')")
        # The marks beside the code (the latest ready submission's), then the attempts line again.
        wait_until(browser, "document.querySelector('.attnkit-marked') !== null")
        wait_until(browser, f"{ATTEMPTS}.dataset.left === '0'")
        # Every cell of the notebook, from its panel: JupyterLab's windowing leaves the cells out of
        # view (below a long diagnosis) out of the document, marked all the same.
        marks = browser.evaluate(
            f"JSON.stringify({PANEL}.content.widgets.map(w => w.node).map(c => ({{"
            "function: c.dataset.attnkitFunction || '', classes: c.className,"
            " diagnoses: [...c.querySelectorAll('.attnkit-mark-diagnosis')].map(d => d.dataset.diagnosis),"
            " note: (c.querySelector('.attnkit-mark') || {}).textContent || ''})))"
        )
        line_after = browser.evaluate(f"{ATTEMPTS}.textContent")
        next_at = browser.evaluate(f"{ATTEMPTS}.dataset.next")
        # The notebook's model is what it was before the marks: they are decorations, not cells or metadata.
        model_after = browser.evaluate(MODEL)
        browser.evaluate(f"window.jupyterapp.shell.activateById({PANEL}.id)")
        browser.evaluate("(document.querySelector('.attnkit-lost') || document.querySelector('.attnkit-marked')).scrollIntoView()")
        time.sleep(0.5)  # the scroll's repaint, for the screenshot only
        if ARTIFACTS.is_dir():
            browser.screenshot(ARTIFACTS / f"lab-{channel}-{answers}.png")
    finally:
        browser.close()
    return {
        "user": user,
        "left_before": left_before,
        "line_before": line_before,
        "toast": toast,
        "framed": framed,
        "sandbox": sandbox,
        "cells": json.loads(marks),
        "line_after": line_after,
        "next_at": next_at,
        "model_unchanged": model_before == model_after,
        "unchanged": hashlib.sha256(notebook.read_bytes()).hexdigest() == before,
    }


@pytest.mark.parametrize("channel", ["exchange", "hub"])
def test_submit_notifies_opens_the_page_and_marks_the_cells(lab: LabHub, channel: str, tmp_path: Path) -> None:
    mistaken = run_student(lab, channel, "mistaken", tmp_path)
    correct = run_student(lab, channel, "correct", tmp_path)
    for seen in (mistaken, correct):
        assert seen["left_before"] == "1" and seen["line_before"] != seen["line_after"], seen["line_after"]
        assert seen["next_at"] and abs(int(seen["next_at"]) - (time.time() + 3600)) < 600
        assert ASSIGNMENT in seen["toast"] and "反馈已就绪" in seen["toast"] and "Invalid" not in seen["toast"]
        assert seen["sandbox"] == "" and seen["unchanged"] and seen["model_unchanged"]
        with lab.db() as db:
            (row,) = db.execute("SELECT * FROM submissions WHERE student = ?", (seen["user"],)).fetchall()
        assert row["state"] == "delivered" and seen["user"] in seen["framed"]
        assert f"{row['score']:g} / {row['max_score']:g}" in seen["framed"]
    cells = {cell["function"]: cell for cell in mistaken["cells"] if cell["function"]}
    scaled = cells["scaled_attention"]
    assert "attnkit-lost" in scaled["classes"] and scaled["diagnoses"] == ["mask_by_multiplying"]
    assert "第 5 节" in scaled["note"] and "失分" in scaled["note"]
    # Only the graded functions' cells are marked; the mistake's other cells keep full marks.
    assert all(cell["note"] == "" for cell in mistaken["cells"] if not cell["function"])
    assert all("attnkit-full" in cell["classes"] for name, cell in cells.items() if name != "scaled_attention")
    assert all(not cell["diagnoses"] and "attnkit-lost" not in cell["classes"] for cell in correct["cells"])
    assert {cell["function"] for cell in correct["cells"] if cell["function"]} == set(cells)
