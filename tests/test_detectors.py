"""The four detectors on real BFCL records: gold calls pass, perturbed calls are caught.

Perturbations follow docs/DATA.md §2b (type: made-up tool name; format: drop / rename a
required key, wrong type; content: a value absent from the conversation; timing: an
identical repeat in BFCL's executable multi-turn environment).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from conftest import BfclEpisode, ai_calls, read_jsonl, require_bfcl
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from toolguard import Guard, ToolSpec, Verdict
from toolguard.context import build_context
from toolguard.detectors import ContentDetector, FormatDetector, TimingDetector, TypeDetector

SINGLE_TURN = [
    ("simple_python", "simple_python_0"),
    ("simple_python", "simple_python_1"),
    ("simple_python", "simple_python_3"),
    ("simple_python", "simple_python_7"),
    ("multiple", "multiple_1"),
    ("multiple", "multiple_2"),
    ("multiple", "multiple_4"),
    ("multiple", "multiple_10"),
    ("live_simple", "live_simple_0-0-0"),
    ("live_simple", "live_simple_2-2-0"),
    ("live_simple", "live_simple_4-3-0"),
    ("live_simple", "live_simple_8-3-4"),
    ("live_multiple", "live_multiple_0-0-0"),  # nested dict argument
    ("live_multiple", "live_multiple_1-0-1"),  # system + user turns
    ("live_multiple", "live_multiple_6-3-1"),  # Chinese request
    ("live_multiple", "live_multiple_9-4-1"),
]
IDS = [r for _, r in SINGLE_TURN]

_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
          "array": list, "object": dict}


def _only(verdicts: list[Verdict]) -> Verdict:
    assert len(verdicts) == 1, verdicts
    return verdicts[0]


def _wrong_type_value(json_type: str) -> Any:
    return {"string": 12345, "integer": "twelve", "number": "twelve", "boolean": "yes",
            "array": "a,b", "object": "x"}[json_type]


# ---------------------------------------------------------------------------- gold
@pytest.mark.parametrize(("category", "record_id"), SINGLE_TURN, ids=IDS)
def test_gold_calls_are_allowed(bfcl: Any, category: str, record_id: str) -> None:
    record = bfcl(category, record_id)
    guard = Guard(record.functions)
    verdicts = guard.check(record.messages())
    assert [v.tool_name for v in verdicts] == [n for n, _ in record.gold]
    assert [v.action for v in verdicts] == ["allow"] * len(record.gold), [
        (v.hallucination, v.reason) for v in verdicts]
    assert all(v.hallucination is None and v.evidence == () for v in verdicts)


def test_gold_calls_of_a_multi_turn_episode_are_allowed(episode: BfclEpisode) -> None:
    guard = Guard(episode.specs())
    seen = 0
    for before, call, answer in episode.replay(len(episode.turns)):
        verdict = _only(guard.check([*before, call]))
        assert verdict.action == "allow", (call.tool_calls, verdict.reason)
        assert "Error" not in answer.content  # the real environment accepted the gold call
        seen += 1
    assert seen == sum(len(t) for t in episode.gold) == 10


# ---------------------------------------------------------------------------- type
@pytest.mark.parametrize(("category", "record_id"), SINGLE_TURN, ids=IDS)
def test_fabricated_tool_name_is_a_type_hallucination(
    bfcl: Any, category: str, record_id: str
) -> None:
    record = bfcl(category, record_id)
    _, args = record.gold[0]
    verdict = _only(Guard(record.functions).check(record.messages([("lookup_everything", args)])))
    assert verdict.action == "block"
    assert verdict.hallucination == "type"
    assert verdict.tool_name == "lookup_everything"
    assert verdict.tool_call_id == "call_0"
    assert "'lookup_everything' is not a valid tool" in verdict.reason
    for fn in record.functions:  # the reason lists every valid tool
        assert fn["name"] in verdict.reason
    (ev,) = verdict.evidence
    assert (ev.detector, ev.code, ev.value) == ("type", "unknown_tool", "lookup_everything")
    assert verdict.feedback() == verdict.reason


def test_misspelled_tool_name_gets_a_did_you_mean_hint(bfcl: Any) -> None:
    record = bfcl("multiple", "multiple_2")
    verdict = _only(Guard(record.functions).check(
        record.messages([("country_info.capitol", {"country": "Brazil"})])))
    assert verdict.hallucination == "type"
    assert "Did you mean 'country_info.capital'?" in verdict.reason


def test_another_tool_of_the_record_is_an_irrelevant_tool(bfcl: Any) -> None:
    # BFCL's wrong_func_name perturbation: a real tool of the record that does not fit
    record = bfcl("multiple", "multiple_2")  # "What is the capital of Brazil?"
    verdict = _only(Guard(record.functions).check(
        record.messages([("country_info.population", {"country": "Brazil"})])))
    assert verdict.action == "block"
    assert verdict.hallucination == "type"
    assert "country_info.capital" in verdict.reason
    assert verdict.evidence[0].code == "irrelevant_tool"
    # with relevance off only fabricated tools are checked
    off = Guard(record.functions, relevance="off")
    assert _only(off.check(record.messages([("country_info.population",
                                             {"country": "Brazil"})]))).allowed


def test_no_fitting_tool_at_all_is_change_tools() -> None:
    from toolguard.relevance import LexicalRelevanceJudge

    tools = [
        {"name": "get_weather", "description": "Current weather forecast for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "convert_currency", "description": "Convert an amount between currencies.",
         "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}}},
    ]
    guard = Guard(tools, relevance=LexicalRelevanceJudge(flag_no_match=True))
    msgs = [HumanMessage("Book a dentist appointment next Tuesday morning"),
            ai_calls(("get_weather", {"city": "Paris"}, "1"))]
    verdict = _only(guard.check(msgs))
    assert verdict.action == "change_tools"
    assert verdict.hallucination == "type"


def test_helper_lookups_named_list_or_find_are_not_irrelevant() -> None:
    """``list_payees`` before ``send_money``, ``find_contact`` before ``book_room``: helper
    lookups (``list``/``find`` are stopwords to the stemmer, so they were missed); a
    restaurant search does not feed a movie search through a shared ``filter`` word."""
    from toolguard.relevance import LexicalRelevanceJudge, _lookup_feeds

    def fn(name: str, description: str, **params: str) -> dict[str, Any]:
        return {"name": name, "description": description, "parameters": {
            "type": "object", "properties": {k: {"type": "string", "description": v}
                                             for k, v in params.items()}}}

    bank = [fn("list_payees", "List the saved payees of the account with their IBANs.",
               session_token="Session token."),
            fn("send_money", "Send money to a payee's IBAN.", to_iban="IBAN of the payee.",
               amount="Amount in EUR.")]
    specs = [ToolSpec.coerce(t) for t in bank]
    judge = LexicalRelevanceJudge()
    assert judge.judge("Send 35 EUR to Celeste Ibarra please.", specs[0], specs).label != (
        "Irrelevant")
    restaurants = ToolSpec.coerce(fn(
        "Restaurants_2_FindRestaurants", "Finds restaurants filtered by category; can "
        "include outdoor seating.", category="Cuisine."))
    movies = ToolSpec.coerce(fn("Movies_3_FindMovies", "Find movies to watch.",
                                genre="Genre filter.", cast="Include this actor."))
    assert not _lookup_feeds(restaurants, movies)
    assert judge.judge("Find a fantasy movie with Emma Watson in the cast.", restaurants,
                       [restaurants, movies]).label == "Irrelevant"


def test_a_lookup_of_what_the_user_named_is_not_irrelevant() -> None:
    """``find_contact("Ulrich")`` before ``create_event`` (attendees' emails) shares no word
    with "set up a meeting with Ulrich" but resolves what the user named; a lookup whose
    value the better tool takes as is (a detour), or one that repeats a request word in
    every parameter, is still irrelevant."""
    def fn(tool: str, description: str, /, **params: str) -> dict[str, Any]:
        return {"name": tool, "description": description, "parameters": {
            "type": "object", "properties": {k: {"type": "string", "description": v}
                                             for k, v in params.items()}}}

    tools = [fn("find_contact", "Look up a colleague or contact by (part of) their name.",
                name="Name or part of it."),
             fn("create_event", "Create a calendar meeting and invite attendees by email.",
                title="Event title.", date="Day.", attendees="Email addresses of invitees."),
             fn("find_attractions", "Attractions worth a visit.", location="City."),
             fn("get_weather", "Weather forecast for a location on a date.",
                location="City.", date="Day."),
             fn("search_flights", "Flights between two airports.", origin="From.",
                destination="To.")]
    guard = Guard(tools)
    ask = HumanMessage("Create a calendar meeting with Ulrich Brandt on Friday, please.")
    assert _only(guard.check([ask, ai_calls(("find_contact", {"name": "Ulrich Brandt"},
                                             "1"))])).allowed
    # the same lookup of a name the request does not state: the relevance judge decides
    other = Guard(tools, detectors=["type"])
    assert _only(other.check([ask, ai_calls(("find_contact", {"name": "Margot"}, "1"))])
                 ).hallucination == "type"
    weather = HumanMessage("What will the weather be in Chicago on Friday?")
    detour = _only(guard.check([weather, ai_calls(("find_attractions",
                                                   {"location": "Chicago"}, "1"))]))
    assert detour.hallucination == "type" and "get_weather" in detour.reason
    filler = _only(guard.check([ask, ai_calls(("search_flights", {
        "origin": "Ulrich Brandt", "destination": "Ulrich Brandt"}, "1"))]))
    assert filler.hallucination == "type"


def test_lexical_relevance_does_not_block_gold_multiplication(bfcl: Any) -> None:
    record = bfcl("live_multiple", "live_multiple_193-87-0")  # "How much is 394 times 213?"
    verdict = _only(Guard(record.functions).check(record.messages()))
    assert verdict.allowed, verdict.reason


# ---------------------------------------------------------------------------- format
def _required_gold_key(record: Any) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    name, args = record.gold[0]
    spec = ToolSpec.from_bfcl(record.function(name))
    key = next(k for k in spec.required if k in args)
    return name, args, key, spec.properties[key]


@pytest.mark.parametrize(("category", "record_id"), SINGLE_TURN, ids=IDS)
def test_dropped_required_key_is_a_format_hallucination(
    bfcl: Any, category: str, record_id: str
) -> None:
    record = bfcl(category, record_id)
    name, args, key, _ = _required_gold_key(record)
    broken = {k: v for k, v in args.items() if k != key}
    verdict = _only(Guard(record.functions).check(record.messages([(name, broken)])))
    assert (verdict.action, verdict.hallucination) == ("block", "format")
    assert f"missing required parameter '{key}'" in verdict.reason
    assert any(e.code == "missing_required" and e.parameter == key for e in verdict.evidence)


@pytest.mark.parametrize(("category", "record_id"), SINGLE_TURN, ids=IDS)
def test_renamed_key_is_a_format_hallucination(bfcl: Any, category: str, record_id: str) -> None:
    record = bfcl(category, record_id)
    name, args, key, _ = _required_gold_key(record)
    renamed = {(f"{k}_value" if k == key else k): v for k, v in args.items()}
    verdict = _only(Guard(record.functions).check(record.messages([(name, renamed)])))
    assert (verdict.action, verdict.hallucination) == ("block", "format")
    codes = {(e.code, e.parameter) for e in verdict.evidence}
    assert ("unexpected_param", f"{key}_value") in codes
    assert ("missing_required", key) in codes
    assert f"'{key}_value'" in verdict.reason and f"'{key}'" in verdict.reason


@pytest.mark.parametrize(("category", "record_id"), SINGLE_TURN, ids=IDS)
def test_wrong_type_is_a_format_hallucination(bfcl: Any, category: str, record_id: str) -> None:
    record = bfcl(category, record_id)
    name, args, key, schema = _required_gold_key(record)
    bad = _wrong_type_value(schema["type"])
    assert not isinstance(bad, _TYPES[schema["type"]])
    verdict = _only(Guard(record.functions).check(record.messages([(name, {**args, key: bad})])))
    assert (verdict.action, verdict.hallucination) == ("block", "format")
    assert any(e.code == "type_error" and e.parameter == key and e.value == bad
               for e in verdict.evidence), verdict.evidence
    assert f"parameter '{key}' must be of type {schema['type']}" in verdict.reason


def test_wrong_type_in_a_nested_argument_names_the_path(bfcl: Any) -> None:
    record = bfcl("live_multiple", "live_multiple_0-0-0")
    name, args = record.gold[0]
    args = copy.deepcopy(args)
    args["new_preferences"]["special_instructions"] = 7
    verdict = _only(Guard(record.functions).check(record.messages([(name, args)])))
    assert verdict.hallucination == "format"
    assert any(e.parameter == "new_preferences.special_instructions" and e.code == "type_error"
               for e in verdict.evidence)
    assert "new_preferences.special_instructions" in verdict.reason


def test_enum_violation_is_a_value_error(bfcl: Any) -> None:
    record = bfcl("live_simple", "live_simple_4-3-0")  # unit: celsius | fahrenheit
    name, args = record.gold[0]
    verdict = _only(Guard(record.functions).check(record.messages([(name, {**args,
                                                                          "unit": "kelvin"})])))
    assert verdict.hallucination == "format"
    assert any(e.code == "value_error" and e.parameter == "unit" for e in verdict.evidence)


def test_max_errors_caps_the_evidence() -> None:
    spec = ToolSpec(name="f", parameters={
        "type": "object", "properties": {k: {"type": "integer"} for k in "abcdef"},
        "required": list("abcdef")})
    msgs = [HumanMessage("go"), ai_calls(("f", {}, "1"))]
    verdict = _only(Guard([spec], detectors=[FormatDetector(max_errors=2)]).check(msgs))
    assert len(verdict.evidence) == 2
    with pytest.raises(ValueError, match="max_errors must be >= 1"):
        FormatDetector(max_errors=0)


def test_allow_unknown_keys() -> None:
    spec = ToolSpec(name="f", parameters={"type": "object",
                                          "properties": {"a": {"type": "string"}}})
    msgs = [HumanMessage("a is x"), ai_calls(("f", {"a": "x", "b": "y"}, "1"))]
    assert _only(Guard([spec], detectors=["format"]).check(msgs)).hallucination == "format"
    assert _only(Guard([spec], detectors=[FormatDetector(allow_unknown_keys=True)]).check(
        msgs)).allowed


def test_array_enum_of_bfcl_docs_applies_to_items(bfcl: Any) -> None:
    record = bfcl("live_multiple", "live_multiple_152-58-6")
    verdict = _only(Guard(record.functions).check(record.messages()))
    assert verdict.allowed, verdict.reason


def test_shared_format_detector_uses_each_guards_schema() -> None:
    detector = FormatDetector()
    as_int = ToolSpec(name="f", parameters={"type": "object",
                                            "properties": {"a": {"type": "integer"}}})
    as_str = ToolSpec(name="f", parameters={"type": "object",
                                            "properties": {"a": {"type": "string"}}})
    msgs = [HumanMessage("a is x"), ai_calls(("f", {"a": "x"}, "1"))]
    assert not _only(Guard([as_int], detectors=[detector]).check(msgs)).allowed
    assert _only(Guard([as_str], detectors=[detector]).check(msgs)).allowed


# ---------------------------------------------------------------------------- timing
def _grep_history(episode: BfclEpisode) -> list[Any]:
    """Turns 0-1 of multi_turn_base_0 replayed for real; the last call is a successful grep."""
    list(episode.replay(2))
    last = episode.transcript[-2]
    assert isinstance(last, AIMessage) and last.tool_calls[0]["name"] == "grep"
    return list(episode.transcript)


def _repeat_last_call(history: list[Any], call_id: str = "again") -> AIMessage:
    call = next(m for m in reversed(history) if isinstance(m, AIMessage)).tool_calls[0]
    return ai_calls((call["name"], dict(call["args"]), call_id))


def test_identical_repeat_after_success_is_a_timing_hallucination(episode: BfclEpisode) -> None:
    history = _grep_history(episode)
    earlier = history[-1]
    assert isinstance(earlier, ToolMessage) and "budget analysis" in earlier.content
    verdict = _only(Guard(episode.specs()).check([*history, _repeat_last_call(history)]))
    assert verdict.action == "block"
    assert verdict.hallucination == "timing"
    assert verdict.replay == earlier.content
    assert verdict.tool_call_id == "again"
    assert verdict.evidence[0].code == "repeated_call"
    assert earlier.content in verdict.feedback()


def test_repeat_with_reordered_keys_and_integral_floats_is_identical() -> None:
    spec = ToolSpec(name="area", effects="read", parameters={
        "type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}}})
    msgs = [HumanMessage("area of 2 by 3"), ai_calls(("area", {"w": 2, "h": 3}, "1")),
            ToolMessage("6", tool_call_id="1"), ai_calls(("area", {"h": 3.0, "w": 2.0}, "2"))]
    assert _only(Guard([spec]).check(msgs)).hallucination == "timing"


def test_repeat_after_an_error_result_is_allowed(episode: BfclEpisode) -> None:
    history = _grep_history(episode)
    failing, answer = episode.step("cd", {"folder": "nonexistent"}, "bad_cd")
    assert json.loads(answer.content)["error"]  # BFCL's environment reports the failure
    history += [failing, answer]
    verdict = _only(Guard(episode.specs()).check([*history, _repeat_last_call(history)]))
    assert verdict.allowed


def test_repeat_after_a_tool_status_error_is_allowed() -> None:
    spec = ToolSpec(name="fetch", effects="read")
    msgs = [HumanMessage("fetch"), ai_calls(("fetch", {}, "1")),
            ToolMessage("timeout", tool_call_id="1", status="error"), ai_calls(("fetch", {}, "2"))]
    assert _only(Guard([spec]).check(msgs)).allowed


def test_repeat_after_an_intervening_state_changing_call_is_allowed(
    episode: BfclEpisode,
) -> None:
    history = _grep_history(episode)
    mkdir, answer = episode.step("mkdir", {"dir_name": "backup"}, "mk")
    assert "error" not in answer.content
    history += [mkdir, answer]
    repeat = ai_calls(("grep", {"file_name": "final_report.pdf", "pattern": "budget analysis"},
                       "again"))
    assert _only(Guard(episode.specs()).check([*history, repeat])).allowed


def test_repeat_after_an_intervening_read_only_call_is_still_a_repeat(
    episode: BfclEpisode,
) -> None:
    history = _grep_history(episode)
    cat, answer = episode.step("cat", {"file_name": "final_report.pdf"}, "cat")
    history += [cat, answer]
    repeat = ai_calls(("grep", {"file_name": "final_report.pdf", "pattern": "budget analysis"},
                       "again"))
    read_only = {"cat": {"effects": "read"}, "grep": {"effects": "read"}}
    verdict = _only(Guard(episode.specs(**read_only)).check([*history, repeat]))
    assert verdict.hallucination == "timing"
    assert "nothing has changed since" in verdict.reason
    # with default (unknown) effects, cat might have changed the world: allowed
    assert _only(Guard(episode.specs()).check([*history, repeat])).allowed


@pytest.mark.parametrize(("between", "flagged"), [
    # the agent took a file name from the email and looked it up: it follows that text
    ({"name": "report-q3.pdf"}, False),
    # the lookup took the user's own words: nothing follows the email's text
    ({"name": "budget"}, True),
])
def test_re_reading_a_text_the_agent_follows_is_no_repeat(between: dict[str, str],
                                                          flagged: bool) -> None:
    """Issue 37: "do the tasks in the email" reads it, acts on one line, reads it again."""
    specs = [ToolSpec(name="read_email", effects="read",
                      parameters={"type": "object", "properties": {"id": {"type": "string"}}}),
             ToolSpec(name="find_file", effects="read",
                      parameters={"type": "object", "properties": {"name": {"type": "string"}}})]
    email = "1. Find report-q3.pdf and check its budget. 2. Reply to Dana with the total."
    msgs = [HumanMessage("Do the tasks in the email e-7 about the budget."),
            ai_calls(("read_email", {"id": "e-7"}, "1")), ToolMessage(email, tool_call_id="1"),
            ai_calls(("find_file", between, "2")), ToolMessage("found", tool_call_id="2"),
            ai_calls(("read_email", {"id": "e-7"}, "3"))]
    verdict = _only(Guard(specs, detectors=["timing"]).check(msgs))
    assert (verdict.hallucination == "timing") == flagged
    # an immediate repeat is still one: nothing was done with the text in between
    assert _only(Guard(specs, detectors=["timing"]).check(
        [*msgs[:3], ai_calls(("read_email", {"id": "e-7"}, "3"))])).hallucination == "timing"


def test_repeated_write_is_blocked_as_a_duplicate_effect(episode: BfclEpisode) -> None:
    list(episode.replay(1))
    mkdir, answer = episode.step("mkdir", {"dir_name": "backup"}, "mk")
    history = [*episode.transcript, mkdir, answer]
    verdict = _only(Guard(episode.specs()).check([*history, _repeat_last_call(history)]))
    assert verdict.hallucination == "timing"
    assert "would repeat its effect" in verdict.reason


def test_repeatable_tool_is_never_a_timing_hallucination(episode: BfclEpisode) -> None:
    list(episode.replay(1))
    cd, answer = episode.step("cd", {"folder": "temp"}, "cd1")
    history = [*episode.transcript, cd, answer]
    repeat = _repeat_last_call(history)
    assert _only(Guard(episode.specs()).check([*history, repeat])).hallucination == "timing"
    repeatable = Guard(episode.specs(cd={"repeatable": True}))
    assert _only(repeatable.check([*history, repeat])).allowed


def test_replay_is_truncated() -> None:
    spec = ToolSpec(name="fetch", effects="read")
    long = "x" * 500
    msgs = [HumanMessage("fetch"), ai_calls(("fetch", {}, "1")),
            ToolMessage(long, tool_call_id="1"), ai_calls(("fetch", {}, "2"))]
    verdict = _only(Guard([spec], detectors=[TimingDetector(max_replay_chars=100)]).check(msgs))
    assert verdict.replay is not None
    assert verdict.replay.startswith("x" * 100) and len(verdict.replay) < 150
    with pytest.raises(ValueError, match="max_replay_chars"):
        TimingDetector(max_replay_chars=-1)


def test_third_identical_call_after_a_blocked_repeat_is_still_a_repeat(
    episode: BfclEpisode,
) -> None:
    guard = Guard(episode.specs())
    history = _grep_history(episode)
    second = _repeat_last_call(history, "second")
    blocked = _only(guard.check([*history, second]))
    assert blocked.hallucination == "timing"
    history += [second, ToolMessage(blocked.feedback(), tool_call_id="second", status="error")]
    third = _repeat_last_call(history, "third")
    assert _only(guard.check([*history, third])).hallucination == "timing"


def test_timing_does_not_depend_on_the_order_of_parallel_calls() -> None:
    tools = [{"name": n, "description": f"{n} of a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}
        for n in ("get_weather", "get_time")]
    actions = []
    for order in (("w", "t"), ("t", "w")):
        calls = {"w": ("get_weather", {"city": "Paris"}, "w"),
                 "t": ("get_time", {"city": "Paris"}, "t")}
        msgs = [HumanMessage("weather and time in Paris"), ai_calls(*(calls[o] for o in order)),
                ToolMessage("sunny", tool_call_id="w"), ToolMessage("noon", tool_call_id="t"),
                ai_calls(("get_weather", {"city": "Paris"}, "again"))]
        actions.append(_only(Guard(tools).check(msgs)).action)
    assert actions[0] == actions[1], actions


def test_repeat_read_after_a_parallel_write_is_allowed() -> None:
    balance = ToolSpec(name="get_balance", effects="read")
    transfer = ToolSpec(name="transfer", effects="write", parameters={
        "type": "object", "properties": {"amount": {"type": "integer"}}})
    guard = Guard([balance, transfer])
    sequential = [HumanMessage("check my balance and transfer 50"),
                  ai_calls(("get_balance", {}, "b1")), ToolMessage("100", tool_call_id="b1"),
                  ai_calls(("transfer", {"amount": 50}, "t1")),
                  ToolMessage("ok", tool_call_id="t1"),
                  ai_calls(("get_balance", {}, "b2"))]
    assert _only(guard.check(sequential)).allowed  # control: passes today
    parallel = [HumanMessage("check my balance and transfer 50"),
                ai_calls(("get_balance", {}, "b1"), ("transfer", {"amount": 50}, "t1")),
                ToolMessage("100", tool_call_id="b1"), ToolMessage("ok", tool_call_id="t1"),
                ai_calls(("get_balance", {}, "b2"))]
    assert _only(guard.check(parallel)).allowed


# ---------------------------------------------------------------------------- content
CONTENT_SWAPS = [
    ("multiple", "multiple_2", "country", "Kazakhstan"),
    ("live_simple", "live_simple_0-0-0", "user_id", 4417),
    ("live_simple", "live_simple_4-3-0", "location", "Reykjavik, Iceland"),
    ("live_simple", "live_simple_2-2-0", "loc", "742 Evergreen Terrace, Springfield, OR"),
    ("live_multiple", "live_multiple_6-3-1", "name", "ProdWorkspace9"),
]


@pytest.mark.parametrize(("category", "record_id", "param", "fake"), CONTENT_SWAPS,
                         ids=[s[1] for s in CONTENT_SWAPS])
def test_value_absent_from_the_conversation_is_a_content_hallucination(
    bfcl: Any, category: str, record_id: str, param: str, fake: Any
) -> None:
    record = bfcl(category, record_id)
    name, args = record.gold[0]
    assert str(fake) not in record.request
    verdict = _only(Guard(record.functions).check(record.messages([(name, {**args, param: fake})])))
    assert verdict.action == "ask_user"
    assert verdict.hallucination == "content"
    assert [e.parameter for e in verdict.evidence] == [param]
    assert verdict.evidence[0].code == "ungrounded_value"
    assert verdict.evidence[0].value == fake
    assert verdict.question and param.replace("_", " ") in verdict.question
    assert f"'{param}'" in verdict.reason


@pytest.mark.parametrize(("category", "record_id", "param", "fake"), CONTENT_SWAPS,
                         ids=[s[1] for s in CONTENT_SWAPS])
def test_extra_grounding_grounds_a_value(
    bfcl: Any, category: str, record_id: str, param: str, fake: Any
) -> None:
    record = bfcl(category, record_id)
    name, args = record.gold[0]
    msgs = record.messages([(name, {**args, param: fake})])
    guard = Guard(record.functions)
    assert _only(guard.check(msgs, extra_grounding=[f"resolved: {param} = {fake}"])).allowed


def test_enum_member_not_in_the_text_is_allowed(bfcl: Any) -> None:
    record = bfcl("live_simple", "live_simple_4-3-0")
    name, args = record.gold[0]
    assert "celsius" not in record.request.lower()
    assert _only(Guard(record.functions).check(record.messages([(name, {**args,
                                                                        "unit": "celsius"})]))
                 ).allowed


def _booking_tool() -> dict[str, Any]:
    return {"name": "book_table", "description": "Book a restaurant table.",
            "parameters": {"type": "object", "properties": {
                "restaurant": {"type": "string"},
                "city": {"type": "string", "default": "Springfield"},
                "outdoor": {"type": "boolean"},
                "guests": {"type": "integer"}},
                "required": ["restaurant"]}}


def test_schema_default_and_boolean_not_in_the_text_are_allowed() -> None:
    msgs = [HumanMessage("Book me a table at Chez Panisse for 4 people"),
            ai_calls(("book_table", {"restaurant": "Chez Panisse", "city": "Springfield",
                                     "outdoor": True, "guests": 4}, "1"))]
    assert _only(Guard([_booking_tool()]).check(msgs)).allowed
    # the same slot with a value that is neither default nor stated is flagged
    msgs[-1] = ai_calls(("book_table", {"restaurant": "Chez Panisse", "city": "Shelbyville",
                                        "outdoor": True, "guests": 4}, "1"))
    verdict = _only(Guard([_booking_tool()]).check(msgs))
    assert verdict.action == "ask_user"
    assert [e.parameter for e in verdict.evidence] == ["city"]


def test_value_present_only_in_an_earlier_tool_message_is_allowed(episode: BfclEpisode) -> None:
    history = _grep_history(episode)  # the grep result holds "Year2024"
    assert "Year2024" in history[-1].content
    assert not any("Year2024" in t for t in episode.turns)
    call = ai_calls(("find", {"path": ".", "name": "Year2024"}, "f"))
    guard = Guard(episode.specs())
    verdict = _only(guard.check([*history, call]))
    assert verdict.hallucination is None  # grounded: no content hallucination
    # but BFCL declares no effects: an undeclared find may change state, and the value
    # sits inside the grep's matching lines, not in a field: the user confirms it
    assert verdict.kind == "provenance" and verdict.confirm
    assert _only(Guard(episode.specs(), detectors=["type", "format", "timing", "content"])
                 .check([*history, call])).allowed
    # before the tool result existed the same value was ungrounded
    before = history[:-2]  # without the grep call and its result
    verdict = _only(guard.check([*before, call]))
    assert verdict.hallucination == "content"


def test_content_check_of_each_call_is_independent(bfcl: Any) -> None:
    record = bfcl("multiple", "multiple_2")
    name, args = record.gold[0]
    verdicts = Guard(record.functions).check(record.messages([(name, args),
                                                              (name, {"country": "Peru"})]))
    assert [v.action for v in verdicts] == ["allow", "ask_user"]
    assert [v.tool_call_id for v in verdicts] == ["call_0", "call_1"]


def test_fabricated_order_id_is_a_content_hallucination() -> None:
    docs = read_jsonl(require_bfcl() / "multi_turn_func_doc" / "trading_bot.json")
    cancel = next(d for d in docs if d["name"] == "cancel_order")
    msgs = [HumanMessage("Please cancel my pending order."),
            ai_calls(("cancel_order", {"order_id": 98765}, "1"))]
    assert _only(Guard([cancel]).check(msgs)).action == "ask_user"


def test_invented_date_is_not_grounded_by_the_word_this() -> None:
    tool = {"name": "book_flight", "description": "Book a flight.", "parameters": {
        "type": "object", "properties": {"destination": {"type": "string"},
                                         "date": {"type": "string"}}}}
    call = ai_calls(("book_flight", {"destination": "Paris", "date": "2024-12-25"}, "1"))
    plain = _only(Guard([tool]).check([HumanMessage("Book a flight for me to Paris"), call]))
    assert plain.action == "ask_user"  # control: passes today
    this = _only(Guard([tool]).check([HumanMessage("Book this flight for me to Paris"), call]))
    assert this.action == "ask_user"


def test_content_detector_validates_options() -> None:
    with pytest.raises(ValueError, match="fuzzy_threshold"):
        ContentDetector(fuzzy_threshold=101)
    with pytest.raises(ValueError, match="token_share"):
        ContentDetector(token_share=0)
    with pytest.raises(ValueError, match="max_value_chars"):
        ContentDetector(max_value_chars=0)
    with pytest.raises(ValueError, match="needs a judge_model"):
        ContentDetector(llm_mode="always")


# ---------------------------------------------------------------------------- detectors alone
def test_detectors_return_none_for_unknown_tools_except_type(bfcl: Any) -> None:
    record = bfcl("multiple", "multiple_2")
    msgs = record.messages([("made_up", {"country": "Atlantis"})])
    ctx = build_context(msgs, {s.name: s for s in map(ToolSpec.coerce, record.functions)})
    (call,) = ctx.calls
    assert TypeDetector().check(call, ctx) is not None
    for detector in (FormatDetector(), TimingDetector(), ContentDetector()):
        assert detector.check(call, ctx) is None
