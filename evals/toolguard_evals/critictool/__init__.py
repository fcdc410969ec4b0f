"""CRITICTOOL (Huang et al., 2025) for toolguard: loader, BFCL-built set, scorer, runner.

- :mod:`toolguard_evals.critictool.data`: records in the official layout, CriticTool's parsers.
- :mod:`toolguard_evals.critictool.build`: a CRITICTOOL-style set built from BFCL v4 multi-turn
  gold.
- :mod:`toolguard_evals.critictool.scoring`: CriticTool's evaluators, rule for rule, and the
  overall.
- :mod:`toolguard_evals.critictool.similarity`: Sentence-BERT (all-mpnet-base-v2) or fallback
  similarity.
- :mod:`toolguard_evals.critictool.run`: generation (unguarded vs guarded) and the report
  (``toolguard eval critictool``).
"""
