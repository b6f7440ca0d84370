"""Fixtures shared by the command-line tests: one `make grade` on a fresh clone with Debian's own
Python 3.11, which test_install.py checks and test_pythons.py takes as its 3.11 reference (the same
virtualenv was built twice, a minute and more of every `make test`)."""

from __future__ import annotations

import pytest

from fresh_clone import SYSTEM_PYTHON, FreshClone, make_grade_with_the_system_python


@pytest.fixture(scope="session")
def system_python_clone(tmp_path_factory: pytest.TempPathFactory) -> FreshClone:
    """`make grade PYTHON=/usr/bin/python3` on a fresh clone of the committed HEAD."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 on this machine")
    return make_grade_with_the_system_python(tmp_path_factory.mktemp("system-python"))
