"""ToolSpec builders: LangChain tools, OpenAI function dicts, BFCL docs, ToolBench entries."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

import pytest
from conftest import SHARED_DATA
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import InjectedState

from toolguard import Guard, ToolSpec
from toolguard.specs import GORILLA_TO_JSON_SCHEMA, gorilla_to_json_schema, to_specs, toolbench_name

JSON_SCHEMA_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def _walk_types(schema: Any, path: str = "$") -> list[tuple[str, str]]:
    """Every ``type`` in a schema with its path."""
    out: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        if isinstance(schema.get("type"), str):
            out.append((path, schema["type"]))
        for name, sub in (schema.get("properties") or {}).items():
            out += _walk_types(sub, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            out += _walk_types(schema["items"], f"{path}[]")
    return out


# ---------------------------------------------------------------------------- LangChain
def test_from_langchain_tool_keeps_name_description_and_schema() -> None:
    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Get the current weather for a city."""
        return city

    spec = ToolSpec.from_langchain(get_weather)
    assert spec.name == "get_weather"
    assert spec.description == "Get the current weather for a city."
    assert spec.parameters["type"] == "object"
    assert set(spec.properties) == {"city", "unit"}
    assert spec.properties["city"]["type"] == "string"
    assert spec.required == ("city",)
    assert spec.effects == "unknown" and spec.repeatable is False
    assert ToolSpec.coerce(get_weather) == spec


def test_from_langchain_reads_effects_and_repeatable_from_metadata() -> None:
    @tool
    def cd(folder: str) -> str:
        """Change the working directory."""
        return folder

    cd.metadata = {"effects": "write", "repeatable": True}
    spec = ToolSpec.from_langchain(cd)
    assert (spec.effects, spec.repeatable) == ("write", True)
    # explicit overrides win over metadata
    assert ToolSpec.from_langchain(cd, effects="read").effects == "read"


def test_from_langchain_leaves_out_injected_state() -> None:
    @tool
    def lookup(key: str, state: Annotated[dict, InjectedState]) -> str:
        """Look a key up in the graph state."""
        return key

    spec = ToolSpec.from_langchain(lookup)
    assert set(spec.properties) == {"key"}
    # a call without the injected argument is well-formed
    msgs = [HumanMessage("look up the key 'alpha'"),
            AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "alpha"}, "id": "1"}])]
    assert [v.action for v in Guard([lookup]).check(msgs)] == ["allow"]


def test_coerce_plain_python_function() -> None:
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first
            b: second
        """
        return a + b

    spec = ToolSpec.coerce(add)
    assert spec.name == "add"
    assert set(spec.required) == {"a", "b"}
    assert spec.properties["a"]["type"] == "integer"


# ---------------------------------------------------------------------------- OpenAI
WEATHER_FN = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}


def test_from_openai_wrapped_and_bare_are_equal() -> None:
    wrapped = ToolSpec.from_openai({"type": "function", "function": WEATHER_FN})
    bare = ToolSpec.from_openai(WEATHER_FN)
    assert wrapped == bare
    assert hash(wrapped) == hash(bare)
    assert bare.name == "get_weather"
    assert bare.required == ("city",)
    assert set(bare.properties) == {"city", "days"}
    assert ToolSpec.coerce({"type": "function", "function": WEATHER_FN}) == bare


def test_from_openai_without_parameters_gets_empty_object_schema() -> None:
    spec = ToolSpec.from_openai({"name": "now", "description": "Current time."})
    assert spec.parameters == {"type": "object", "properties": {}}
    assert spec.required == ()


def test_from_openai_without_name_raises() -> None:
    with pytest.raises(ValueError, match="name"):
        ToolSpec.from_openai({"description": "nameless", "parameters": {}})


def test_specs_differing_only_in_schema_are_not_equal() -> None:
    other = json.loads(json.dumps(WEATHER_FN))
    other["parameters"]["properties"]["city"]["type"] = "integer"
    assert ToolSpec.from_openai(WEATHER_FN) != ToolSpec.from_openai(other)


def test_properties_given_as_a_list_keep_their_names() -> None:
    # FamilyTool gives properties as a list of {name, ...}
    spec = ToolSpec.from_openai({
        "name": "get_birthday",
        "parameters": {"type": "object",
                       "properties": [{"name": "person", "type": "string"}, {"type": "string"}]},
    })
    assert spec.properties == {"person": {"type": "string"}}


# ---------------------------------------------------------------------------- BFCL
@pytest.mark.parametrize(
    ("category", "record_id", "function"),
    [
        ("simple_python", "simple_python_83", "calculate_distance"),  # tuple of float
        ("simple_python", "simple_python_109", "random_forest.train"),  # any
        ("multiple", "multiple_8", "realestate.find_properties"),  # nested dict of float
        ("live_multiple", "live_multiple_121-46-0", "get_time_headway"),  # nested tuple/dict
    ],
)
def test_from_bfcl_maps_every_gorilla_type_to_json_schema(
    bfcl: Any, category: str, record_id: str, function: str
) -> None:
    doc = bfcl(category, record_id).function(function)
    spec = ToolSpec.from_bfcl(doc)
    assert spec.name == doc["name"]
    assert spec.description == doc["description"]
    assert spec.parameters["type"] == "object"
    assert spec.required == tuple(doc["parameters"].get("required", ()))
    source = dict(_walk_types(doc["parameters"]))
    mapped = dict(_walk_types(spec.parameters))
    assert source.keys() == mapped.keys()
    for path, gorilla in source.items():
        assert mapped[path] == GORILLA_TO_JSON_SCHEMA[gorilla], path
        assert mapped[path] in JSON_SCHEMA_TYPES
    assert ToolSpec.coerce(doc) == spec  # a dict with parameters.type == "dict" is a BFCL doc


def test_from_bfcl_specific_mappings(bfcl: Any) -> None:
    coords = ToolSpec.from_bfcl(bfcl("simple_python", "simple_python_83").function(
        "calculate_distance"))
    assert coords.properties["coord1"]["type"] == "array"  # tuple
    assert coords.properties["coord1"]["items"]["type"] == "number"  # float
    train = ToolSpec.from_bfcl(bfcl("simple_python", "simple_python_109").function(
        "random_forest.train"))
    assert train.properties["data"]["type"] == "string"  # any
    headway = ToolSpec.from_bfcl(bfcl("live_multiple", "live_multiple_121-46-0").function(
        "get_time_headway"))
    ego = headway.properties["ego_info"]
    assert ego["type"] == "object"  # dict
    assert ego["properties"]["position"]["type"] == "array"
    assert ego["properties"]["position"]["items"]["type"] == "number"
    assert headway.properties["bboxes"]["items"]["type"] == "object"


def test_gorilla_to_json_schema_keeps_other_keys() -> None:
    schema = {"type": "dict", "properties": {"unit": {"type": "string", "enum": ["C", "F"],
                                                      "default": "C", "optional": True}},
              "required": []}
    out = gorilla_to_json_schema(schema)
    assert out["type"] == "object"
    assert out["properties"]["unit"] == schema["properties"]["unit"]
    assert schema["type"] == "dict"  # the input is not modified


def test_from_bfcl_without_name_raises() -> None:
    with pytest.raises(ValueError, match="name"):
        ToolSpec.from_bfcl({"description": "x", "parameters": {"type": "dict"}})


def test_multi_turn_docs_build_specs(episode: Any) -> None:
    specs = episode.specs()
    assert len(specs) == len(episode.docs) == 32  # gorilla_file_system 18 + posting_api 14
    for s in specs:
        for path, typ in _walk_types(s.parameters):
            assert typ in JSON_SCHEMA_TYPES, (s.name, path, typ)


# ---------------------------------------------------------------------------- ToolBench
def _relytoolbench_record(query_id: int) -> dict[str, Any]:
    path = SHARED_DATA / "relytoolbench" / "G1_instruction.json"
    if not path.is_file():
        pytest.skip(f"RelyToolBench data not found at {path} (set TOOLGUARD_DATA_DIR)")
    records = json.loads(path.read_text(encoding="utf-8"))
    return next(r for r in records if r["query_id"] == query_id)


def test_from_toolbench_real_api_list_entry() -> None:
    record = _relytoolbench_record(2213)
    api = next(a for a in record["api_list"] if a["api_name"] == "MatchIncidents")
    spec = ToolSpec.from_toolbench(api)
    assert spec.name == "matchincidents_for_rugbyapi2"
    assert spec.description == "Get incidents for a specific Rugby match."
    assert spec.required == ("id",) or spec.required == ("is_id",)
    (param,) = spec.properties.values()
    assert param["type"] == "integer"  # NUMBER
    assert ToolSpec.coerce(api) == spec
    # every entry of the record builds, names are unique and within 64 characters
    specs = to_specs(record["api_list"])
    assert len({s.name for s in specs}) == len(record["api_list"])
    assert all(len(s.name) <= 64 for s in specs)


@pytest.mark.parametrize(
    ("api_name", "tool_name", "expected"),
    [
        ("Get Weather (v2)", "Open Weather", "get_weather_v2_for_open_weather"),
        ("from", "Flights", "is_from_for_flights"),  # change_name
        ("123 Lookup", "  Numbers--API ", "get_123_lookup_for_numbers_api"),
        ("Search", "x" * 80, ("search_for_" + "x" * 80)[-64:]),  # the LAST 64 characters
    ],
)
def test_toolbench_name_standardizes(api_name: str, tool_name: str, expected: str) -> None:
    assert toolbench_name(api_name, tool_name) == expected
    spec = ToolSpec.from_toolbench({"api_name": api_name, "tool_name": tool_name})
    assert spec.name == expected


def test_from_toolbench_parameter_types_and_optional_defaults() -> None:
    spec = ToolSpec.from_toolbench({
        "tool_name": "Movies", "api_name": "search", "api_description": "Search movies.",
        "required_parameters": [{"name": "q", "type": "STRING", "description": "query"}],
        "optional_parameters": [
            {"name": "page", "type": "NUMBER", "description": "", "default": 1},
            {"name": "adult", "type": "BOOLEAN", "description": "", "default": ""},
            {"name": "genre", "type": "ENUM", "description": ""},
        ],
    })
    assert spec.required == ("q",)
    assert {k: v["type"] for k, v in spec.properties.items()} == {
        "q": "string", "page": "integer", "adult": "boolean", "genre": "string"}
    assert spec.properties["page"]["default"] == 1
    assert "default" not in spec.properties["adult"]  # "" is no default


def test_from_toolbench_parameter_names_match_what_the_model_sees() -> None:
    api = next(a for a in _relytoolbench_record(2213)["api_list"]
               if a["api_name"] == "MatchIncidents")
    spec = ToolSpec.from_toolbench(api)
    msgs = [HumanMessage("Get the incidents of rugby match 9945302."),
            AIMessage("", tool_calls=[{"name": spec.name, "args": {"is_id": 9945302},
                                       "id": "1"}])]
    assert [v.action for v in Guard([spec]).check(msgs)] == ["allow"]


def test_from_toolbench_keeps_example_values_of_required_parameters() -> None:
    api = next(a for a in _relytoolbench_record(2213)["api_list"]
               if a["api_name"] == "MatchIncidents")
    assert "9945302" in json.dumps(ToolSpec.from_toolbench(api).parameters)


# ---------------------------------------------------------------------------- errors
def test_duplicate_names_raise_value_error() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'get_weather'"):
        to_specs([WEATHER_FN, {"type": "function", "function": WEATHER_FN}])
    with pytest.raises(ValueError, match="duplicate"):
        Guard([WEATHER_FN, WEATHER_FN])


@pytest.mark.parametrize("bad", [42, "get_weather", None, 3.5])
def test_unsupported_tool_form_raises_type_error(bad: Any) -> None:
    with pytest.raises(TypeError, match="cannot build a ToolSpec"):
        ToolSpec.coerce(bad)
    with pytest.raises(TypeError):
        Guard([WEATHER_FN, bad])


def test_coerce_returns_a_spec_unchanged() -> None:
    spec = ToolSpec.from_openai(WEATHER_FN)
    assert ToolSpec.coerce(spec) is spec


def test_spec_is_frozen() -> None:
    spec = ToolSpec.from_openai(WEATHER_FN)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
