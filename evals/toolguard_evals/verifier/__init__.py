"""Training data, training command and pre-check report of toolguard's learned verifier.

- :mod:`~toolguard_evals.verifier.data`: labelled tool-fit and slot-presence examples from
  gold, with the train / dev / evaluation split of every source.
- :mod:`~toolguard_evals.verifier.train`: ``toolguard verifier train``, fine-tuning the
  MiniLM cross-encoder and writing the model, its data card and its calibration.
- :mod:`~toolguard_evals.verifier.report`: the three-way pre-check report of a trained
  verifier beside the deterministic pre-check.
"""
