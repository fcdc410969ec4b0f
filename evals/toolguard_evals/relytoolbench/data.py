"""RelyToolBench's query files: one :class:`RtbCase` per query (DATA.md §4).

Files in ``../shared/data/relytoolbench`` (X-LANCE/ToolHallucination,
``solvable_queries/test_instruction``), nine in all:

======================  =====================================  =========  =========
subset                  files                                  records    solvable
======================  =====================================  =========  =========
Original                ``G1_instruction``, ``G2_category``,   163/124/61 yes
                        ``G3_instruction``
Missing Parameter       ``{group}_missing_all_arguments``      99/103/60  no: ask
Unmatched Tools         ``{group}_with_unmatched_tools``       163/124/61 no: change
======================  =====================================  =========  =========

348 + 262 + 348 = 958 queries (the paper's Table 1).  Original and Unmatched Tools share
query ids, so a case id is ``{file}:{query_id}``.  ``G1_instruction_missing_arguments``
(3 records) is not part of the benchmark and is not loaded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from toolguard.specs import ToolSpec
from toolguard_evals.datadir import dataset_dir

Subset = Literal["Original", "Missing Parameter", "Unmatched Tools"]
Group = Literal["G1_instruction", "G2_category", "G3_instruction"]
SUBSETS: tuple[Subset, ...] = get_args(Subset)
GROUPS: tuple[Group, ...] = get_args(Group)
SUFFIX: dict[Subset, str] = {
    "Original": "",
    "Missing Parameter": "_missing_all_arguments",
    "Unmatched Tools": "_with_unmatched_tools",
}
NECESSARY_CALLS: dict[Subset, int] = {"Original": 1, "Missing Parameter": 0,
                                      "Unmatched Tools": 0}
"""Necessary tool calls per task for the Benefit-Cost Utility (DATA.md §4; the paper's
solvable tasks need at least one call, its unsolvable ones none)."""


@dataclass(frozen=True, slots=True)
class RtbCase:
    """One RelyToolBench query.

    Attributes:
        id: ``{file}:{query_id}``, unique over the benchmark.
        subset: Original, Missing Parameter or Unmatched Tools.
        group: G1_instruction, G2_category or G3_instruction.
        query: The user request the agent sees.
        apis: The record's ``api_list`` entries, duplicates (same ToolBench name) dropped.
        specs: One :class:`~toolguard.specs.ToolSpec` per API, named ``{api}_for_{tool}``.
        orig_query: Missing Parameter only: the query before its arguments were removed.
    """

    id: str
    subset: Subset
    group: Group
    query: str
    apis: tuple[dict[str, Any], ...]
    specs: tuple[ToolSpec, ...] = field(repr=False)
    orig_query: str | None = None

    @property
    def file(self) -> str:
        """The file stem the case comes from (``G1_instruction_with_unmatched_tools``)."""
        return f"{self.group}{SUFFIX[self.subset]}"

    @property
    def solvable(self) -> bool:
        """Only Original tasks can be solved with the given tools and query."""
        return self.subset == "Original"

    def api(self, name: str) -> dict[str, Any] | None:
        """The ``api_list`` entry of the tool named ``name`` (ToolBench naming), or ``None``."""
        for spec, api in zip(self.specs, self.apis, strict=True):
            if spec.name == name:
                return api
        return None

    def spec(self, name: str) -> ToolSpec | None:
        """The spec named ``name``, or ``None`` (a fabricated tool)."""
        return next((s for s in self.specs if s.name == name), None)


def load_relytoolbench(
    data_dir: str | Path | None = None,
    *,
    limit: int | None = None,
    subsets: Sequence[Subset] = SUBSETS,
    groups: Sequence[Group] = GROUPS,
    ids: Sequence[str] | None = None,
) -> list[RtbCase]:
    """Load RelyToolBench cases, subset by subset, group by group, in file order.

    Args:
        data_dir: The folder with the nine files; default ``../shared/data/relytoolbench``
            next to the repository.
        limit: First records per file (``None``: all; 958 cases over the nine files).
        subsets: Subsets to load.
        groups: Groups to load.
        ids: Keep only these case ids (``{file}:{query_id}``), after ``limit``.

    Raises:
        FileNotFoundError: A file is missing (the message names it), or no data folder
            was found (:class:`~toolguard_evals.datadir.DataNotFoundError`).
        ValueError: ``limit`` < 1, or an unknown subset or group.
    """
    if limit is not None and limit < 1:
        raise ValueError("limit must be >= 1 (or None for all records)")
    bad = [s for s in subsets if s not in SUBSETS] + [g for g in groups if g not in GROUPS]
    if bad:
        raise ValueError(f"unknown subset/group {bad}; subsets: {SUBSETS}, groups: {GROUPS}")
    root = dataset_dir("relytoolbench", data_dir)
    cases: list[RtbCase] = []
    for subset in subsets:
        for group in groups:
            path = root / f"{group}{SUFFIX[subset]}.json"
            if not path.is_file():
                raise FileNotFoundError(f"RelyToolBench file missing: {path}")
            records = json.loads(path.read_text(encoding="utf-8"))
            for record in records[:limit]:
                cases.append(_case(record, subset, group, path.stem))
    if ids is not None:
        wanted = set(ids)
        cases = [c for c in cases if c.id in wanted]
    return cases


def _case(record: dict[str, Any], subset: Subset, group: Group, stem: str) -> RtbCase:
    apis: dict[str, dict[str, Any]] = {}
    specs: dict[str, ToolSpec] = {}
    for api in record["api_list"]:
        # RapidAPI GETs only read; other methods may change something
        effects = "read" if str(api.get("method", "")).upper() == "GET" else "unknown"
        spec = ToolSpec.from_toolbench(api, effects=effects)
        if spec.name not in specs:
            specs[spec.name] = spec
            apis[spec.name] = api
    return RtbCase(
        id=f"{stem}:{record['query_id']}",
        subset=subset,
        group=group,
        query=str(record["query"]),
        apis=tuple(apis.values()),
        specs=tuple(specs.values()),
        orig_query=record.get("orig_query"),
    )
