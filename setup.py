"""The compiled part of moonbox: one optional C module (everything else is in pyproject.toml).

``moonbox.isolation._wire`` moves the round trip of a frame between host and worker out of
the interpreter. It is optional: where it cannot be built (no C compiler), the install goes
on and the same steps run in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "moonbox.isolation._wire",
            ["moonbox/isolation/_wire.c"],
            optional=True,
        ),
    ],
)
