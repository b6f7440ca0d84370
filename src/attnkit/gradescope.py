"""Kept for ``python -m attnkit.gradescope``: it lives in ``attnkit.course.gradescope``."""

import sys

from attnkit.course.gradescope import *  # noqa: F403
from attnkit.course.gradescope import main

if __name__ == "__main__":
    sys.exit(main())
