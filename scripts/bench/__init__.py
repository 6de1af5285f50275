"""Benchmarks: timings of CARB's own steps and of its accuracy on third-party data (last line of each is
``key=value`` pairs that ``scripts/figures.py`` reads into docs/RESULTS.md)."""
