"""Spreadsheets: find, read, write cells, formulas, tabs, charts."""

from __future__ import annotations

from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    ToolError,
    choice,
    strings,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import person

_ID = text("Spreadsheet id from find_spreadsheet or create_spreadsheet.", "identifier")
TOOLS = (
    tool("find_spreadsheet", "Find spreadsheets by (part of) their title.", "read", "files",
         ["title"], title=text("Title or part of it.", "keyword")),
    tool("create_spreadsheet", "Create an empty spreadsheet.", "write", "files", ["title"],
         title=text("Title of the new spreadsheet.", "title")),
    tool("read_range", "Values of a cell range.", "read", "cells",
         ["spreadsheet_id", "cell_range"], spreadsheet_id=_ID,
         cell_range=text("A1-style range, e.g. A1:C10, optionally with a tab: 'Tab'!A1:B2.",
                         "code")),
    tool("write_cells", "Write values into a range, row by row.", "write", "cells",
         ["spreadsheet_id", "cell_range", "values"], spreadsheet_id=_ID,
         cell_range=text("A1-style range.", "code"),
         values=strings("The values, left to right, top to bottom.", "free_text")),
    tool("set_formula", "Put a formula into one cell.", "write", "cells",
         ["spreadsheet_id", "cell", "formula"], spreadsheet_id=_ID,
         cell=text("Cell, e.g. B15.", "code"),
         formula=text("The formula, starting with =.", "formula")),
    tool("add_tab", "Add a tab (worksheet) to a spreadsheet.", "write", "tabs",
         ["spreadsheet_id", "tab_name"], spreadsheet_id=_ID,
         tab_name=text("Name of the new tab.", "title")),
    tool("create_chart", "Insert a chart of a range.", "write", "charts",
         ["spreadsheet_id", "cell_range", "chart_type"], spreadsheet_id=_ID,
         cell_range=text("Data range including headers.", "code"),
         chart_type=choice("Chart type.", "bar", "line", "pie", "scatter")),
)

_SHEETS = ("Q2 expenses", "Inventory", "Team roster", "Sales 2025", "Marketing budget",
           "Event guest list", "Training log", "Vendor contacts")


class SheetsBackend(Backend):
    """Five spreadsheets with a few filled cells each."""

    def setup(self) -> None:
        r = self.rng
        sheets = {}
        for title in r.sample(_SHEETS, 5):
            sid = self.unique(lambda: f"sh_{r.getrandbits(40):010x}")
            cells = {f"A{i}": f"Row {i}" for i in range(1, 6)}
            cells.update({f"B{i}": str(r.randrange(10, 900)) for i in range(2, 6)})
            sheets[sid] = {"title": title, "tabs": ["Sheet1"], "cells": cells, "charts": []}
        self.s = {"sheets": sheets}

    def _sheet(self, sid: str) -> dict[str, Any]:
        s: dict[str, Any] | None = self.s["sheets"].get(sid)
        if s is None:
            raise ToolError(f"no spreadsheet {sid}")
        return s

    def do_find_spreadsheet(self, title: str) -> dict[str, Any]:
        q = title.casefold()
        return {"spreadsheets": [{"spreadsheet_id": k, "title": v["title"]}
                                 for k, v in self.s["sheets"].items()
                                 if q in v["title"].casefold()]}

    def do_create_spreadsheet(self, title: str) -> dict[str, Any]:
        sid = self.unique(lambda: f"sh_{self.rng.getrandbits(40):010x}")
        self.s["sheets"][sid] = {"title": title, "tabs": ["Sheet1"], "cells": {}, "charts": []}
        return {"spreadsheet_id": sid, "title": title}

    @staticmethod
    def _cells(cell_range: str) -> list[str]:
        rng = cell_range.split("!")[-1]
        a, _, z = rng.partition(":")
        z = z or a
        c0, r0 = a[0], int(a[1:])
        c1, r1 = z[0], int(z[1:])
        return [f"{chr(c)}{row}" for row in range(r0, r1 + 1)
                for c in range(ord(c0), ord(c1) + 1)]

    def do_read_range(self, spreadsheet_id: str, cell_range: str) -> dict[str, Any]:
        s = self._sheet(spreadsheet_id)
        try:
            cells = self._cells(cell_range)
        except (ValueError, IndexError) as exc:
            raise ToolError(f"bad range {cell_range}") from exc
        return {"range": cell_range, "values": {c: s["cells"].get(c, "") for c in cells}}

    def do_write_cells(self, spreadsheet_id: str, cell_range: str,
                       values: list[str]) -> dict[str, Any]:
        s = self._sheet(spreadsheet_id)
        cells = self._cells(cell_range)
        if len(cells) != len(values):
            raise ToolError(f"{cell_range} has {len(cells)} cells, got {len(values)} values")
        s["cells"].update(dict(zip(cells, values, strict=True)))
        return {"updated_cells": len(cells), "range": cell_range}

    def do_set_formula(self, spreadsheet_id: str, cell: str, formula: str) -> dict[str, Any]:
        s = self._sheet(spreadsheet_id)
        if not formula.startswith("="):
            raise ToolError("formulas start with =")
        s["cells"][cell] = formula
        return {"cell": cell, "formula": formula, "status": "calculated"}

    def do_add_tab(self, spreadsheet_id: str, tab_name: str) -> dict[str, Any]:
        s = self._sheet(spreadsheet_id)
        if tab_name in s["tabs"]:
            raise ToolError(f"tab {tab_name} exists")
        s["tabs"].append(tab_name)
        return {"tabs": list(s["tabs"])}

    def do_create_chart(self, spreadsheet_id: str, cell_range: str,
                        chart_type: str) -> dict[str, Any]:
        s = self._sheet(spreadsheet_id)
        cid = f"chart-{self.rng.randrange(100, 999)}"
        s["charts"].append({"id": cid, "range": cell_range, "type": chart_type})
        return {"chart_id": cid, "type": chart_type}


# ============================================================================ scenarios
def _title(b: Builder) -> str:
    return str(b.pick(*[v["title"] for v in b.backend.s["sheets"].values()]))


def _find(b: Builder, title: str) -> str:
    out = b.call("find_spreadsheet", {"title": title}, reuse=True)
    return str(next(x["spreadsheet_id"] for x in out["spreadsheets"] if x["title"] == title))


_FUNCS = (("SUM", "total", "the sum"), ("AVERAGE", "average", "the mean"),
          ("MAX", "largest value", "the maximum"), ("MIN", "smallest value", "the minimum"))


def formula(b: Builder) -> None:
    title = _title(b)
    fn, word, _ = b.pick(*_FUNCS)
    col = b.pick("B", "C", "D")
    last = b.rng.randrange(8, 40)
    target = f"{col}{last + 1}"
    rng = f"{col}2:{col}{last}"
    f = f"={fn}({rng})"
    style = b.pick("said", "verbatim")
    if style == "verbatim":
        b.user(b.pick(f"In the {title} sheet, put {f} into {target}.",
                      f"Set {target} of '{title}' to the formula {f}."))
        how = None
    else:
        b.user(b.pick(f"In the {title} spreadsheet, put the {word} of {rng} in {target}.",
                      f"I need the {word} of {col}2 to {col}{last} in cell {target} of "
                      f"{title}."))
        how = f"formula for {word!r} of {rng}"
    sid = _find(b, title)
    b.call("set_formula", {"spreadsheet_id": sid, "cell": target, "formula": f},
           derived={"formula": how})
    b.say(f"{target} now holds {f}.")
    if b.chance(0.5):
        fn2, word2, _ = b.pick(*[x for x in _FUNCS if x[0] != fn])
        target2 = f"{col}{last + 2}"
        b.user(b.pick(f"And the {word2} in {target2}.", f"Do the same with {fn2} in "
                      f"{target2}."), kind="anaphora")
        f2 = f"={fn2}({rng})"
        b.call("set_formula", {"spreadsheet_id": sid, "cell": target2, "formula": f2},
               derived={"formula": f"{fn2} over the same range {rng}"})
        b.say(f"{target2} now holds {f2}.")


def read(b: Builder) -> None:
    title = _title(b)
    rng = b.pick("A1:B5", "B2:B5", "A1:A5")
    b.user(b.pick(f"What's in {rng} of the {title} sheet?", f"Read me {rng} from {title}."))
    sid = _find(b, title)
    out = b.call("read_range", {"spreadsheet_id": sid, "cell_range": rng})
    b.say("Values: " + ", ".join(f"{k}={v}" for k, v in out["values"].items()) + ".")
    if b.chance(0.5):
        ctype = b.pick("bar", "line", "pie")
        b.user(b.pick(f"Make a {ctype} chart of that range.", f"Chart it as a {ctype} chart."),
               kind="anaphora")
        b.call("create_chart", {"spreadsheet_id": sid, "cell_range": rng, "chart_type": ctype})
        b.say(f"Added a {ctype} chart of {rng}.")


def write_row(b: Builder) -> None:
    title = b.pick("Team roster", "Event guest list", "Vendor contacts")
    if title not in [v["title"] for v in b.backend.s["sheets"].values()]:
        title = _title(b)
    f, la = person(b.rng.randrange(1000))
    dept = b.pick("Design", "Finance", "Logistics", "Research")
    row = b.rng.randrange(6, 30)
    rng = f"A{row}:C{row}"
    day = b.pick("2026-04-01", "2026-05-18", "2026-09-07")
    b.user(b.pick(f"Add a row to {title}: '{f} {la}', '{dept}', '{day}' in {rng}.",
                  f"In {title}, write {f} {la} | {dept} | {day} into {rng}."))
    sid = _find(b, title)
    b.call("write_cells", {"spreadsheet_id": sid, "cell_range": rng,
                           "values": [f"{f} {la}", dept, day]})
    b.say(f"Row {row} of {title} is filled in.")


def new_sheet(b: Builder) -> None:
    title = b.pick("Offsite budget", "Hiring tracker", "Reading list", "Garden planner")
    tab = b.pick("Travel", "Candidates", "Backlog", "Seeds")
    b.user(b.pick(f"Create a spreadsheet called '{title}' and add a tab named '{tab}'.",
                  f"New sheet '{title}' please, with a tab '{tab}'."))
    out = b.call("create_spreadsheet", {"title": title})
    b.call("add_tab", {"spreadsheet_id": out["spreadsheet_id"], "tab_name": tab})
    b.say(f"Created '{title}' ({out['spreadsheet_id']}) with the tab {tab}.")
    if b.chance(0.5):
        headers = b.pick(["Item", "Cost", "Owner"], ["Name", "Role", "Stage"])
        b.user(b.pick(f"Put the headers {', '.join(headers)} in A1:C1 of it.",
                      f"Write {' / '.join(headers)} as headers, A1 to C1."), kind="anaphora")
        b.call("write_cells", {"spreadsheet_id": out["spreadsheet_id"], "cell_range": "A1:C1",
                               "values": headers}, derived={"cell_range": "A1 to C1"})
        b.say("Headers written.")


def vague_formula(b: Builder) -> None:
    title = _title(b)
    b.user(b.pick(f"Add a formula to my {title} sheet.", f"I need a calculation in {title}."),
           kind="vague_request", label="ask_user", missing=["cell", "formula"])
    b.ask("Sure - which cell, and what should it calculate?")
    fn, word, _ = b.pick(*_FUNCS)
    last = b.rng.randrange(6, 25)
    rng = f"B2:B{last}"
    target = f"B{last + 1}"
    b.user(b.pick(f"{target}, the {word} of {rng}.", f"Put the {word} of {rng} into "
                  f"{target}."), kind="answer")
    sid = _find(b, title)
    b.call("set_formula", {"spreadsheet_id": sid, "cell": target, "formula": f"={fn}({rng})"},
           derived={"formula": f"formula for {word!r} of {rng}"})
    b.say(f"{target} = {fn}({rng}).")


DOMAIN = Domain(
    name="sheets",
    service="Gridwise spreadsheets",
    tools=TOOLS,
    backend=SheetsBackend,
    scenarios={"formula": formula, "read": read, "write_row": write_row,
               "new_sheet": new_sheet, "vague_formula": vague_formula},
    infeasible=(
        Infeasible(("Export the sales sheet as a CSV and email it to me.",
                    "Email the inventory to my boss."),
                   "I can't export files or send email."),
        Infeasible(("Protect the budget sheet with a password.",
                    "Lock column B so nobody can edit it."),
                   "Sheet protection isn't available through my tools."),
        Infeasible(("Who changed the roster yesterday?", "Show me the edit history."),
                   "I can't see the edit history."),
        Infeasible(("Make the header row bold and blue.",
                    "Change the font of the whole sheet to Arial."),
                   "Formatting isn't something my tools can change."),
    ),
)

__all__ = ["DOMAIN", "TOOLS", "SheetsBackend"]
