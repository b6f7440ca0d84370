"""Kept for ``python -m attnkit.release``: it lives in ``attnkit.course.release``."""

import sys

from attnkit.course.release import *  # noqa: F403
from attnkit.course.release import main

if __name__ == "__main__":
    sys.exit(main())
