"""Capture: everything that touches torch, transformers or NVML at record time.

Import torch, transformers and pynvml only inside functions, so that the rest
of tracekit runs where they are not installed.
"""
