"""CRITICTOOL (Huang et al., 2025) for toolguard: loader, BFCL-built set, scorer, runner.

- :mod:`evals.critictool.data`: records in the official layout, CriticTool's parsers.
- :mod:`evals.critictool.build`: a CRITICTOOL-style set built from BFCL v4 multi-turn gold.
- :mod:`evals.critictool.scoring`: CriticTool's evaluators, rule for rule, and the overall.
- :mod:`evals.critictool.similarity`: Sentence-BERT (all-mpnet-base-v2) or fallback similarity.
- :mod:`evals.critictool.run`: generation (unguarded vs guarded) and the report
  (``toolguard eval critictool``).
"""
