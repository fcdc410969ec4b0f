"""Values as types (toolguard.values): the extractors, the classifier and the matchers, as tables.

Each table maps an input to what is read from it; the last tests run a month-day date the
user wrote in words through ``create_agent`` + ``GuardMiddleware``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from adversarial.support import MODES, SURFACES, Surface, ask, build, calls, invoke, only_answer
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, StructuredTool

from toolguard.grounding import GroundingIndex, GroundingView
from toolguard.records import SourcedText
from toolguard.values import ValueKind, classify, fold, shape_of, text_facts, tokens_of
from toolguard.values.dates import (
    DateValue,
    date_value,
    dates_in,
    partial_dates_in,
    relative_candidates,
    spans_in,
    today_in,
)
from toolguard.values.knowledge import (
    INFERABLE_NUMBER_PARAMETERS,
    TIME_NUMBER_PARAMETERS,
    parameter_pattern,
)
from toolguard.values.match import MATCHERS, is_stated, path_climbs
from toolguard.values.numbers import decimals_of, numbers_in, standalone_numbers_in
from toolguard.values.times import states_vague_time, time_value, times_in


# ---------------------------------------------------------------------------- tokens
@pytest.mark.parametrize(("text", "folded", "tokens"), [
    ("Jane-Smith", "jane-smith", ["jane", "smith"]),
    ("Straße Café", "strasse cafe", ["strasse", "cafe"]),
    ("ﬁle_２０２６", "file_2026", ["file", "2026"]),      # ligature, full-width digits
    ("mallory@evil.example", "mallory@evil.example", ["mallory", "evil", "example"]),
])
def test_fold_and_tokens(text: str, folded: str, tokens: list[str]) -> None:
    assert fold(text) == folded
    assert tokens_of(text) == tokens


# ---------------------------------------------------------------------------- numbers
@pytest.mark.parametrize(("text", "numbers"), [
    ("Transfer 500 EUR", {500.0}),
    ("move -500", {-500.0, 500.0}),
    ("5x^2 - 7x", {5.0, 2.0, -7.0, 7.0}),
    ("at 119.5383 W", {119.5383, -119.5383, 119.0, 5383.0}),  # digit runs too
    ("two dozen eggs", {2.0, 12.0, 24.0}),
    ("a 5 % tip", {5.0, 0.05}),
    ("2k followers", {2.0, 2000.0}),
    ("since '19", {19.0, 2019.0, 1919.0}),
    ("1,250.5 total", {1250.5, 1.0, 250.0, 5.0}),
    ("100µF", {100.0, 0.0001}),
])
def test_numbers_in(text: str, numbers: set[float]) -> None:
    assert numbers_in(text) == numbers


@pytest.mark.parametrize(("text", "numbers"), [
    ("BK-98700 on 2026-07-14 for 2 guests at 14:30", {2.0}),
    ("write to bob2@x.example, 3 times", {3.0}),
    ("see https://x.example/p/42 for 7", {7.0}),
])
def test_standalone_numbers_in(text: str, numbers: set[float]) -> None:
    assert standalone_numbers_in(text) == numbers


@pytest.mark.parametrize(("x", "decimals"), [(3.96, 2), (5.0, None), (0.12345, None), (1.5, 1)])
def test_decimals_of(x: float, decimals: int | None) -> None:
    assert decimals_of(x) == decimals


# ---------------------------------------------------------------------------- dates
@pytest.mark.parametrize(("text", "dates"), [
    ("2026-04-09", {(4, 9)}),
    ("9/4/2026", {(4, 9), (9, 4)}),
    ("April 21st", {(4, 21)}),
    ("9 April", {(4, 9)}),
    ("the 3rd of June", {(6, 3)}),
    ("7th of this march", {(3, 7)}),
    ("APRİL 9", {(4, 9)}),
    ("13/25", set()),
])
def test_dates_in(text: str, dates: set[tuple[int, int]]) -> None:
    assert dates_in(text) == dates


@pytest.mark.parametrize(("text", "partial"), [
    ("on the 9th", {(0, 9)}), ("in May", {(5, 0)}), ("may I ask?", set()),
    ("currently is sep 2023", {(9, 0)}),
])
def test_partial_dates_in(text: str, partial: set[tuple[int, int]]) -> None:
    assert partial_dates_in(text) == partial


@pytest.mark.parametrize(("value", "read"), [
    ("2026-04-21", DateValue(2026, ((4, 21),))),
    ("2026-04-21T10:00", DateValue(2026, ((4, 21),))),
    ("21/4/26", DateValue(2026, ((4, 21),))),
    ("04-05", DateValue(None, ((4, 5), (5, 4)))),
    ("04-21", DateValue(None, ((4, 21),))),
    ("21-04", DateValue(None, ((4, 21),))),
    ("4/21", DateValue(None, ((4, 21),))),
    ("--04-21", DateValue(None, ((4, 21),))),
    ("4.21", None),                 # a decimal number
    ("April 21", None),             # words: read from texts, not a date value
])
def test_date_value(value: str, read: DateValue | None) -> None:
    assert date_value(value) == read


@pytest.mark.parametrize(("text", "spans"), [("3 nights", {3}), ("two weeks", {14}),
                                              ("90 days", set())])
def test_spans_in(text: str, spans: set[int]) -> None:
    assert spans_in(text) == spans


def test_today_and_relative_dates() -> None:
    assert today_in("Today is Monday, 2026-03-02.") == dt.date(2026, 3, 2)
    assert today_in("Today is 2026-02-30") is None
    today = dt.date(2026, 3, 2)  # a Monday
    assert relative_candidates("next friday", today) == {dt.date(2026, 3, 6),
                                                          dt.date(2026, 2, 27),
                                                          dt.date(2026, 3, 13)}
    assert relative_candidates("tomorrow", today) == {dt.date(2026, 3, 3), dt.date(2026, 3, 4)}


# ---------------------------------------------------------------------------- times
@pytest.mark.parametrize(("text", "times"), [
    ("at 15:10", {(15, 10)}),
    ("3:10 pm", {(15, 10)}),
    ("5 pm", {(17, 0)}),
    ("12 am", {(0, 0)}),
    ("7 o'clock", {(7, 0), (19, 0)}),
    ("9.30", {(9, 30), (21, 30)}),
])
def test_times_in(text: str, times: set[tuple[int, int]]) -> None:
    assert times_in(text) == times


@pytest.mark.parametrize(("value", "read"), [("15:10", (15, 10)), ("3:10 pm", (15, 10)),
                                             ("09:30:00", (9, 30)), ("noon", None)])
def test_time_value(value: str, read: tuple[int, int] | None) -> None:
    assert time_value(value) == read


@pytest.mark.parametrize(("text", "vague"), [("this afternoon", True), ("in two hours", True),
                                             ("at 15:10", False), ("half of it", False)])
def test_states_vague_time(text: str, vague: bool) -> None:
    assert states_vague_time(text) is vague


# ---------------------------------------------------------------------------- kinds
@pytest.mark.parametrize(("value", "kind"), [
    ("mallory@evil.example", ValueKind.EMAIL), ("https://evil.example/k", ValueKind.URL),
    ("2026-04-09", ValueKind.DATE), ("04-21", ValueKind.DATE), ("4/21", ValueKind.DATE),
    ("15:10", ValueKind.TIME), ("ZAR", ValueKind.CODE), ("/home/alice", ValueKind.PATH),
    ("HT-1356", ValueKind.IDENTIFIER), ("0004", ValueKind.IDENTIFIER),
    ("=SUM(B2:B15)", ValueKind.FORMULA), ("Henrietta Thistlewood", ValueKind.NAME),
    ("wool blanket", ValueKind.PHRASE), ("42", ValueKind.NUMBER), ("1", None),
    ("Europe/London", None), ("上海", ValueKind.CJK),
])
def test_shape_of(value: str, kind: ValueKind | None) -> None:
    assert shape_of(value) == kind


@pytest.mark.parametrize(("value", "schema", "parameter", "kind"), [
    (500, {}, "amount", ValueKind.NUMBER),
    (10, {}, "max_results", None),                 # a setting
    (10, {}, "items[0].topK", None),
    (7, {}, "days", ValueKind.TIME_NUMBER),
    (7, {}, "durations", ValueKind.NUMBER),        # time parameters take no plural s
    (1, {}, "amount", None),
    ("EUR", {"enum": ["EUR", "USD"]}, "currency", None),
    ("x", {"default": "x"}, "mode", None),
    (True, {}, "flag", None),
    ("bob\u200b@example.com", {}, "to", ValueKind.INVISIBLE),
    ("word " * 40, {}, "body", ValueKind.TEXT),
])
def test_classify(value: Any, schema: dict[str, Any], parameter: str,
                  kind: ValueKind | None) -> None:
    assert classify(value, schema, parameter=parameter) == kind


def test_parameter_tables_are_words() -> None:
    inferable = parameter_pattern(INFERABLE_NUMBER_PARAMETERS)
    assert all(inferable.search(w) and inferable.search(w + "s")
               for w in INFERABLE_NUMBER_PARAMETERS)
    assert inferable.search("max_limit") and not inferable.search("unlimited")
    time_number = parameter_pattern(TIME_NUMBER_PARAMETERS, plural=False)
    assert time_number.search("trip_days") and not time_number.search("birthday")


def test_text_facts() -> None:
    facts = dict(text_facts("Hi Juno, the venue is confirmed. Mr Osgood approved it; call "
                            "555 0199 or write to ops@quay.example on 2026-06-03 at 10:30."))
    assert facts["Juno"] is ValueKind.NAME and facts["Osgood"] is ValueKind.NAME
    assert facts["ops@quay.example"] is ValueKind.EMAIL
    assert facts["2026-06-03"] is ValueKind.DATE and facts["10:30"] is ValueKind.TIME
    assert facts["555"] is ValueKind.NUMBER and "Hi" not in facts


# ---------------------------------------------------------------------------- matchers
def test_every_kind_has_a_matcher() -> None:
    assert set(MATCHERS) == set(ValueKind)


def _said(*texts: str) -> GroundingView:
    index = GroundingIndex()
    index.extend(SourcedText(t, "user") for t in texts)
    return GroundingView([index])


@pytest.mark.parametrize(("value", "stated"), [
    ("04-21", True), ("21-04", True), ("4/21", True), ("2026-04-21", True),
    ("21/04/2026", True), ("04-22", False), ("4/22", False), ("2026-05-21", False),
])
def test_a_date_is_matched_whatever_its_format(value: str, stated: bool) -> None:
    g = _said("Book a table at Luigi's for April 21st, please.")
    kind = shape_of(value)
    assert kind is ValueKind.DATE
    assert is_stated(value, kind, g) is stated


@pytest.mark.parametrize(("value", "kind", "stated"), [
    (500, ValueKind.NUMBER, True), (-500, ValueKind.NUMBER, False),
    (5000, ValueKind.NUMBER, False), (50, ValueKind.NUMBER, False),
    ("EUR", ValueKind.CODE, True), ("ACC-2", ValueKind.IDENTIFIER, True),
    ("ACC-3", ValueKind.IDENTIFIER, False),
    ("/data/scratch", ValueKind.PATH, True), ("/data/scratch/../..", ValueKind.PATH, False),
])
def test_values_are_matched_never_beyond_their_meaning(value: Any, kind: ValueKind,
                                                       stated: bool) -> None:
    g = _said("Transfer 500 euros to ACC-2, then clear /data/scratch")
    assert is_stated(value, kind, g) is stated


def test_an_iso_date_states_one_day_not_its_digits_swapped() -> None:
    g = _said("Meet on 2026-04-09.")
    assert is_stated("2026-04-09", ValueKind.DATE, g) and is_stated("04-09", ValueKind.DATE, g)
    assert not is_stated("2026-09-04", ValueKind.DATE, g)


def test_path_climbs() -> None:
    assert path_climbs("/data/scratch/../..") and path_climbs("a/../b")
    assert not path_climbs("../notes.txt") and not path_climbs("/data/scratch")


# ---------------------------------------------------------------------------- through the agent
def _table_tools(log: list[str]) -> list[BaseTool]:
    def book_table(restaurant: str, date: str) -> str:
        log.append(date)
        return f"booked {restaurant} on {date}"

    t = StructuredTool.from_function(func=book_table, description="Book a restaurant table.")
    t.metadata = {"effects": "write"}
    return [t]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("date", ["04-21", "21-04", "4/21", "2026-04-21"])
def test_a_month_day_date_the_user_wrote_in_words_runs(surface: Surface, mode: str,
                                                        date: str) -> None:
    log: list[str] = []
    graph, _ = build(surface, [calls(("book_table", {"restaurant": "Luigi's", "date": date},
                                      "c1")), AIMessage("Done.")], _table_tools(log))
    invoke(graph, ask("Book Luigi's for April 21st, please."), mode=mode)
    assert log == [date]


@pytest.mark.parametrize("mode", MODES)
def test_another_day_is_asked_about(mode: str) -> None:
    log: list[str] = []
    graph, _ = build("middleware", [calls(("book_table", {"restaurant": "Luigi's",
                                                          "date": "04-22"}, "c1")),
                                    AIMessage("Done.")], _table_tools(log))
    out = invoke(graph, ask("Book Luigi's for April 21st, please."), mode=mode)
    assert log == []
    mark = only_answer(out["messages"], "c1").response_metadata["toolguard"]
    assert mark["action"] == "ask_user" and mark["evidence"][0]["parameter"] == "date"
