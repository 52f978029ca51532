"""The one native extension: structspec's output-head kernel (server/structspec/model/_head.c).

Everything else about the package is in pyproject.toml. The extension is
optional: where it does not compile, structspec installs without it and
llama.cpp computes the output head, as before (structspec/model/head.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "structspec.model._head",
            sources=["server/structspec/model/_head.c"],
            # OpenMP: the kernel runs on the threads of llama.cpp's own OpenMP runtime
            extra_compile_args=["-O3", "-std=gnu11", "-fopenmp"],
            extra_link_args=["-fopenmp"],
            optional=True,
        )
    ]
)
