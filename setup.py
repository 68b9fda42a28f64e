"""Only the native part of the build; everything else is in pyproject.toml.

tracekit.ingest._kscan (tracekit/ingest/_kscan.c) is the ingest scanner. It is optional: where no C compiler is
present the install still succeeds and ingest falls back to the DuckDB reader (slower; same tables).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("tracekit.ingest._kscan", ["tracekit/ingest/_kscan.c"], optional=True, extra_compile_args=["-O3", "-std=gnu11"]),
    ]
)
