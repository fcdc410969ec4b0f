"""Evaluation harnesses for toolguard on public benchmarks.

- :mod:`toolguard_evals.bfcl`: loaders for the BFCL v4 data shipped in the ``bfcl-eval`` wheel and
  a small executor for its multi-turn environments.
- :mod:`toolguard_evals.detector_suite`: a labelled suite of hallucinated tool calls built from
  BFCL gold calls, and its scorer (``toolguard eval detectors``).

Both need ``pip install --no-deps bfcl-eval==2026.3.23`` (plus ``mpmath`` for the
multi-turn math environment, in the ``bfcl`` extra).
"""
