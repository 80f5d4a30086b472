"""The compiled parts of klog: the record batch codec (klog/protocol/_recordsc.c) and the
producer's send() for its commonest call (klog/producer/_sendc.c).

Everything else is declared in pyproject.toml; setuptools reads ``ext_modules`` only from
here. ``optional=True``: a machine without a C compiler or Python headers still installs klog
and runs the pure-Python codec, which is the reference the extension is tested against
(tests/protocol/test_records_compiled.py skips, saying so, when the extension is missing).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "klog.protocol._recordsc",
            ["klog/protocol/_recordsc.c", "klog/protocol/_recordsc_encode.c",
             "klog/protocol/_recordsc_decode.c", "klog/protocol/_recordsc_keys.c",
             "klog/protocol/_recordsc_segments.c"],
            depends=["klog/protocol/_recordsc.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        ),
        Extension(
            "klog.producer._sendc",
            ["klog/producer/_sendc.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        ),
    ]
)
