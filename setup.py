"""Builds the walk's compiled kernel (projections/_walk_kernel.c) during `pip install` / `pip install -e .`.

Optional: without a C compiler the install still succeeds and the walk runs its numpy path (the same values);
`projections.perspective_walk.use_kernel` says which one runs. Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("projections._walk_kernel", ["projections/_walk_kernel.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c99"])])
