"""Headless Chromium driven through its DevTools protocol: a page a test can log in on, fill and click.

Debian's Chromium (``make browser``), its remote-debugging port on 127.0.0.1 (the port Chromium
chose, from ``DevToolsActivePort`` in its profile), one page, spoken to over a WebSocket
(``websocket-client``, already in the lock). What a page shows is read with the DOM domain
(``DOM.getOuterHTML``), which works on pages whose Content-Security-Policy forbids scripts.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket
from commands import start_tool, stop_group

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Without these, Chromium tries to reach Google's services, which this network refuses.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


class DevToolsError(AssertionError):
    """A DevTools call the browser refused (a node gone with a reload, say)."""


class Browser:
    """One headless Chromium with one page."""

    def __init__(self, profile: Path, log: Path, timeout: float = 120.0) -> None:
        if CHROMIUM is None:
            raise AssertionError("chromium is not installed: `make test` installs it (make browser)")
        profile.mkdir(parents=True, exist_ok=True)
        self.process = start_tool([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"], log=log)
        deadline = time.monotonic() + timeout
        active = profile / "DevToolsActivePort"
        while not (active.is_file() and active.read_text().strip()):
            assert self.process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        port = int(active.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as response:
            targets = json.loads(response.read())
        page = next(t for t in targets if t.get("type") == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.call("Page.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise DevToolsError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def go(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.settle()

    def settle(self, timeout: float = 60.0) -> None:
        """Until the page (after its redirects) has loaded."""
        time.sleep(0.2)
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete":
            assert time.monotonic() < deadline, "the page did not load"
            time.sleep(0.1)

    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def html(self) -> str:
        """The page as Chromium built it (through the DOM domain: no script of ours runs in it)."""
        root = self.call("DOM.getDocument", depth=-1)["root"]
        return str(self.call("DOM.getOuterHTML", nodeId=root["nodeId"])["outerHTML"])

    def wait_for(self, selector: str, timeout: float) -> str:
        """The page's HTML once ``selector`` matches (the page may reload itself meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                root = self.call("DOM.getDocument", depth=1)["root"]
                if self.call("DOM.querySelector", nodeId=root["nodeId"], selector=selector).get("nodeId"):
                    return self.html()
            except DevToolsError:  # the document was replaced between two calls (its own refresh): look again
                pass
            assert time.monotonic() < deadline, f"no {selector} in {self.url()}:\n{self.html()[-3000:]}"
            time.sleep(0.5)

    def set_file(self, selector: str, path: Path) -> None:
        root = self.call("DOM.getDocument", depth=1)["root"]
        node = self.call("DOM.querySelector", nodeId=root["nodeId"], selector=selector)["nodeId"]
        assert node, f"no {selector} on {self.url()}"
        self.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node)

    def click(self, selector: str) -> None:
        """Click ``selector`` as a user would (a real mouse event at its centre), then wait for the load."""
        root = self.call("DOM.getDocument", depth=1)["root"]
        node = self.call("DOM.querySelector", nodeId=root["nodeId"], selector=selector)["nodeId"]
        assert node, f"no {selector} on {self.url()}"
        self.call("DOM.scrollIntoViewIfNeeded", nodeId=node)
        quad = self.call("DOM.getBoxModel", nodeId=node)["model"]["content"]
        x, y = (quad[0] + quad[4]) / 2, (quad[1] + quad[5]) / 2
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        self.settle()

    def type_into(self, selector: str, text: str) -> None:
        root = self.call("DOM.getDocument", depth=1)["root"]
        node = self.call("DOM.querySelector", nodeId=root["nodeId"], selector=selector)["nodeId"]
        assert node, f"no {selector} on {self.url()}"
        self.call("DOM.focus", nodeId=node)
        self.call("Input.insertText", text=text)

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def clear_cookies(self) -> None:
        self.call("Network.clearBrowserCookies")

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            stop_group(self.process, timeout=20)
