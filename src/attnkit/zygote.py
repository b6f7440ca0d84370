"""Kept for ``python -I -m attnkit.zygote`` (a seed started by an older launcher): the zygote lives in
``attnkit.sandbox.zygote``, which the grader starts itself."""

import runpy

if __name__ == "__main__":
    runpy.run_module("attnkit.sandbox.zygote", run_name="__main__", alter_sys=True)
