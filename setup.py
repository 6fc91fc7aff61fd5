"""The compiled parts of moonbox: three optional C modules (everything else is in
pyproject.toml).

``moonbox.isolation._wire`` moves the round trip of a frame between host and worker out of
the interpreter. ``moonbox.sandbox._heap`` gives a sandbox's runtime a faster allocator
under the same heap cap. ``moonbox.sandbox._resume`` resumes a run with the meter's
bookkeeping compiled. All are optional: where they cannot be built (no C compiler), the
install goes on, the round trip's steps run in Python, runtimes keep lupa's allocator and
every resume takes the prelude's way.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "moonbox.isolation._wire",
            ["moonbox/isolation/_wire.c"],
            optional=True,
        ),
        Extension(
            "moonbox.sandbox._heap",
            ["moonbox/sandbox/_heap.c"],
            optional=True,
        ),
        Extension(
            "moonbox.sandbox._resume",
            ["moonbox/sandbox/_resume.c"],
            depends=["moonbox/sandbox/_resume.h", "moonbox/sandbox/_slots.h"],
            optional=True,
        ),
        Extension(
            "moonbox.engine._tick",
            ["moonbox/engine/_tick.c"],
            depends=["moonbox/sandbox/_resume.h", "moonbox/sandbox/_slots.h"],
            optional=True,
        ),
    ],
)
