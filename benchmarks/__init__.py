"""Benchmarks and the demo: measuring harness kept out of the installed package.

Scripts run from a checkout (``python benchmarks/dataload.py``, ``python benchmarks/demo.py``);
``benchmarks.harness`` holds what several of them (and the tests that check the
comparisons are fair) share.
"""
