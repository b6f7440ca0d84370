"""attnkit's JupyterLab extension: the feedback of a submit as a notification, a panel and marks beside the code (issue 51)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "attnkit-labextension"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "attnkit_lab"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    from jupyter_server.utils import url_path_join

    from attnkit_lab.handlers import MarksHandler, PageHandler, StateHandler, SubmitHandler

    web_app = server_app.web_app
    base = url_path_join(web_app.settings["base_url"], "attnkit-lab")
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "state"), StateHandler),
            (url_path_join(base, "page"), PageHandler),
            (url_path_join(base, "marks"), MarksHandler),
            (url_path_join(base, "submit"), SubmitHandler),
        ],
    )
