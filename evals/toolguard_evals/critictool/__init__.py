"""CRITICTOOL (Huang et al., 2025) for toolguard: loader, BFCL-built set, scorer, runner.

- :mod:`~toolguard_evals.critictool.data`: records in the official layout, CriticTool's parsers.
- :mod:`~toolguard_evals.critictool.build`: a CRITICTOOL-style set built from BFCL v4
  multi-turn gold.
- :mod:`~toolguard_evals.critictool.scoring` / :mod:`~toolguard_evals.critictool.similarity`:
  CriticTool's evaluators, rule for rule, and the paper's overall.
- :mod:`~toolguard_evals.critictool.guarded`: the guarded system, ``create_agent`` with
  toolguard's middleware.
- :mod:`~toolguard_evals.critictool.run`: generation (unguarded vs guarded) and the report.
"""
