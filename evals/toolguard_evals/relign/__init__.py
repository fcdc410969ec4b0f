"""Relign: reliability alignment of a tool-calling model (synthesis, SFT, DPO, serve, eval).

The training half of Xu et al., "Reducing Tool Hallucination via Reliability Alignment"
(ICML 2025, arXiv 2412.04141): teach a model the indecisive actions (ChangeTools when no
tool fits, TalkToUser when information is missing) with SFT on synthesized data, then DPO
on sampled responses ranked correct > indecisive > hallucinated by toolguard's detectors.

- :mod:`~toolguard_evals.relign.config`: settings and the ``ci`` / ``cpu`` / ``paper`` sizes.
- :mod:`~toolguard_evals.relign.chat_format`: the native RelyToolBench format, tool template.
- :mod:`~toolguard_evals.relign.synth`: the 4 : 3 : 3 SFT data from BFCL / ToolBench files.
- :mod:`~toolguard_evals.relign.models`: the base model (bundled GGUF or Hugging Face).
- :mod:`~toolguard_evals.relign.sft` / :mod:`~toolguard_evals.relign.dpo`: TRL trainers.
- :mod:`~toolguard_evals.relign.pairs`: sampling and preference pairs.
- :mod:`~toolguard_evals.relign.export`: adapter / merged folders and serve commands.
- :mod:`~toolguard_evals.relign.evaluate`: base vs SFT vs DPO, unguarded and guarded.
- :mod:`~toolguard_evals.relign.run` / :mod:`~toolguard_evals.relign.cli`: the stages and
  ``toolguard relign``.

Importing this package imports no training library (torch, transformers, trl, peft: the
``relign`` extra); the modules that need them import them inside their functions.
"""

from toolguard_evals.relign.config import PRESETS, SIZES, RelignConfig, preset

__all__ = ["PRESETS", "SIZES", "RelignConfig", "preset"]
