"""godist vs gloo benchmark: ``python -m godist.bench --help``.

Both backends run in the same spawned processes over the same ranks,
interleaved in time (A-B-B-A), each cell checked for correctness before it is
timed; results are reported with the nccl-tests definitions (time, algbw,
busbw) plus p50/p95 latency, CPU time per op and the godist/gloo speed ratio.
See docs/PERFORMANCE.md.

``--device cuda`` compares godist with torch's nccl on CUDA tensors the same
way (``cuda.py``); ``--vs deepspeed`` puts DeepSpeed's CPU all-reduce kernel
beside godist and gloo (``ds.py``; deepspeed is an optional extra,
``pip install 'godist[bench]'``).
"""

from .cli import main  # noqa: F401

__all__ = ["main"]
