"""``python -m attnkit``: the same command line as the ``attnkit`` script."""

from attnkit.launch import run

if __name__ == "__main__":
    run()
