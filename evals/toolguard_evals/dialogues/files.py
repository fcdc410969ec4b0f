"""Cloud file storage: search, folders, moving, renaming, sharing, links, imports."""

from __future__ import annotations

from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    ToolError,
    choice,
    integer,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import EMAIL_DOMAINS, person

TOOLS = (
    tool("search_files", "Find files whose name contains the keyword.", "read", "find",
         ["keyword"], keyword=text("Word or phrase in the file name.", "keyword"),
         file_type=choice("Restrict to a type.", "document", "spreadsheet", "presentation",
                          "pdf", "image", "any", default="any")),
    tool("list_folder", "Files and sub-folders of a folder.", "read", "find", ["path"],
         path=text("Folder path, e.g. /Projects/Orion.", "address")),
    tool("create_folder", "Create a folder (parents are created too).", "write", "organise",
         ["path"], path=text("Folder path to create.", "address")),
    tool("move_file", "Move a file into a folder.", "write", "organise",
         ["file_id", "destination"], file_id=text("File id from search_files.", "identifier"),
         destination=text("Target folder path.", "address")),
    tool("rename_file", "Rename a file.", "write", "organise", ["file_id", "new_name"],
         file_id=text("File id.", "identifier"),
         new_name=text("New file name with extension.", "title")),
    tool("share_file", "Give a person access to a file.", "write", "share",
         ["file_id", "email", "role"], file_id=text("File id.", "identifier"),
         email=text("Email of the person.", "email", fmt="email"),
         role=choice("Access level.", "viewer", "commenter", "editor")),
    tool("create_share_link", "Create a link anyone can open, valid for some days.", "write",
         "share", ["file_id"], file_id=text("File id.", "identifier"),
         expires_in_days=integer("Days until the link stops working.", minimum=1, maximum=90,
                                 default=30)),
    tool("delete_file", "Move a file to the bin (restorable for 30 days).", "write", "delete",
         ["file_id"], file_id=text("File id.", "identifier")),
    tool("import_from_url", "Download a file from a web address into a folder.", "write",
         "import", ["url", "destination"], url=text("http(s) address of the file.", "url",
                                                    fmt="uri"),
         destination=text("Folder path.", "address")),
)

_FILES = (
    ("Q3 budget.xlsx", "/Finance"), ("Onboarding deck.pptx", "/HR"),
    ("Kickoff notes.docx", "/Projects"), ("Supplier contract.pdf", "/Legal"),
    ("Team photo.jpg", "/Shared"), ("Roadmap 2026.pptx", "/Product"),
    ("Expense report March.xlsx", "/Finance"), ("Brand guidelines.pdf", "/Marketing"),
    ("Draft proposal v2.docx", "/Sales"), ("Floor plan.pdf", "/Facilities"),
    ("Interview questions.docx", "/HR"), ("Release checklist.docx", "/Engineering"),
)
_PROJECTS = ("Orion", "Lighthouse", "Bramble", "Tessellate", "Kingfisher", "Saltire")


class FilesBackend(Backend):
    """Eight files from a fixed list, with seeded ids."""

    def setup(self) -> None:
        r = self.rng
        files = {}
        for name, folder in r.sample(_FILES, 8):
            fid = self.unique(lambda: f"f_{r.getrandbits(36):09x}")
            files[fid] = {"file_id": fid, "name": name, "folder": folder}
        self.s = {"files": files, "folders": sorted({f["folder"] for f in files.values()}),
                  "shares": [], "links": {}}

    def _file(self, file_id: str) -> dict[str, Any]:
        f: dict[str, Any] | None = self.s["files"].get(file_id)
        if f is None:
            raise ToolError(f"no file {file_id}")
        return f

    def do_search_files(self, keyword: str, file_type: str = "any") -> dict[str, Any]:
        k = keyword.casefold()
        return {"files": [dict(f) for f in self.s["files"].values()
                          if k in f["name"].casefold()]}

    def do_list_folder(self, path: str) -> dict[str, Any]:
        if path not in self.s["folders"]:
            raise ToolError(f"no folder {path}")
        return {"path": path, "files": [f["name"] for f in self.s["files"].values()
                                        if f["folder"] == path]}

    def do_create_folder(self, path: str) -> dict[str, Any]:
        if not path.startswith("/"):
            raise ToolError("paths start with /")
        if path in self.s["folders"]:
            raise ToolError(f"{path} exists")
        self.s["folders"].append(path)
        return {"created": path}

    def do_move_file(self, file_id: str, destination: str) -> dict[str, Any]:
        f = self._file(file_id)
        if destination not in self.s["folders"]:
            raise ToolError(f"no folder {destination}")
        f["folder"] = destination
        return {"file_id": file_id, "folder": destination}

    def do_rename_file(self, file_id: str, new_name: str) -> dict[str, Any]:
        f = self._file(file_id)
        old, f["name"] = f["name"], new_name
        return {"file_id": file_id, "old_name": old, "name": new_name}

    def do_share_file(self, file_id: str, email: str, role: str) -> dict[str, Any]:
        f = self._file(file_id)
        self.s["shares"].append({"file_id": file_id, "email": email, "role": role})
        return {"file": f["name"], "shared_with": email, "role": role}

    def do_create_share_link(self, file_id: str, expires_in_days: int = 30) -> dict[str, Any]:
        f = self._file(file_id)
        url = f"https://share.cirrusdrive.example/s/{self.rng.getrandbits(40):010x}"
        self.s["links"][url] = {"file_id": file_id, "days": expires_in_days}
        return {"file": f["name"], "url": url, "expires_in_days": expires_in_days}

    def do_delete_file(self, file_id: str) -> dict[str, Any]:
        f = self._file(file_id)
        del self.s["files"][file_id]
        return {"deleted": f["name"], "restorable_days": 30}

    def do_import_from_url(self, url: str, destination: str) -> dict[str, Any]:
        if not url.startswith(("http://", "https://")):
            raise ToolError("not a web address")
        if destination not in self.s["folders"]:
            self.s["folders"].append(destination)
        name = url.rstrip("/").rsplit("/", 1)[-1] or "download"
        fid = self.unique(lambda: f"f_{self.rng.getrandbits(36):09x}")
        self.s["files"][fid] = {"file_id": fid, "name": name, "folder": destination}
        return {"file_id": fid, "name": name, "folder": destination}


# ============================================================================ scenarios
def _file(b: Builder) -> dict[str, Any]:
    names = {n for n, _ in _FILES}  # not files imported or renamed in this dialogue
    return dict(b.fresh("file", [f for f in b.backend.s["files"].values()
                                 if f["name"] in names]))


def _stem(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _find(b: Builder, f: dict[str, Any]) -> str:
    words = _stem(f["name"]).split()
    keyword = " ".join(words[:2]) if len(words) > 1 else words[0]
    keyword = keyword if keyword.casefold() in b.last_user.casefold() else _stem(f["name"])
    out = b.call("search_files", {"keyword": keyword}, reuse=True)
    return str(next(x["file_id"] for x in out["files"] if x["name"] == f["name"]))


def _email(b: Builder) -> str:
    f, la = person(b.rng.randrange(1000))
    return f"{f.lower()}.{la.lower()}@{b.pick(*EMAIL_DOMAINS)}"


def share(b: Builder) -> None:
    f = _file(b)
    email = _email(b)
    role = b.pick("viewer", "commenter", "editor")
    said = {"viewer": b.pick("view-only", "as a viewer", "read access"),
            "commenter": b.pick("as a commenter", "comment access"),
            "editor": b.pick("as an editor", "edit rights", "so they can edit")}[role]
    b.user(b.pick(f"Share the {_stem(f['name'])} file with {email}, {said}.",
                  f"Give {email} {said} to '{f['name']}'."))
    fid = _find(b, f)
    b.call("share_file", {"file_id": fid, "email": email, "role": role},
           derived={"role": f"{said!r}"})
    b.say(f"Shared {f['name']} with {email} ({role}).")
    if b.chance(0.45):
        email2 = _email(b)
        b.user(b.pick(f"Do the same for {email2}.", f"And {email2} too, same access."),
               kind="anaphora")
        b.call("share_file", {"file_id": fid, "email": email2, "role": role},
               derived={"role": "same access as before"})
        b.say(f"{email2} has {role} access too.")


def link(b: Builder) -> None:
    f = _file(b)
    days = b.pick(3, 7, 14)
    b.user(b.pick(f"Get me a share link for {_stem(f['name'])} that expires in {days} days.",
                  f"I need a public link to '{f['name']}', valid for {days} days."))
    fid = _find(b, f)
    out = b.call("create_share_link", {"file_id": fid, "expires_in_days": days})
    b.say(f"Here you go: {out['url']} (valid {days} days).")
    if b.chance(0.4):
        email = _email(b)
        b.user(b.pick(f"Also give {email} edit rights on it.",
                      f"And share it with {email} as editor."), kind="anaphora")
        b.call("share_file", {"file_id": fid, "email": email, "role": "editor"})
        b.say(f"{email} can edit it now.")


def organise(b: Builder) -> None:
    project = b.pick(*_PROJECTS)
    path = f"/Projects/{project}"
    f = _file(b)
    b.user(b.pick(f"Create a folder {path} and move the {_stem(f['name'])} file into it.",
                  f"Make a new folder at {path}, then put '{f['name']}' there."))
    b.call("create_folder", {"path": path})
    fid = _find(b, f)
    b.call("move_file", {"file_id": fid, "destination": path})
    b.say(f"Created {path} and moved {f['name']} there.")


def rename(b: Builder) -> None:
    f = _file(b)
    ext = f["name"].rsplit(".", 1)[1]
    new = f"{b.pick('Final', 'Approved', 'Archived')} {_stem(f['name']).lower()}.{ext}"
    b.user(b.pick(f"Rename '{f['name']}' to '{new}'.", f"Please change the name of "
                  f"{f['name']} to {new}."))
    fid = _find(b, f)
    b.call("rename_file", {"file_id": fid, "new_name": new})
    b.say(f"Renamed to {new}.")


def import_url(b: Builder) -> None:
    host = b.pick("downloads.northwind-labs.example", "files.copperleaf.example",
                  "static.meadowgate.example")
    doc = b.pick("annual-report-2025.pdf", "price-list-q2.xlsx", "safety-manual.pdf",
                 "press-kit.zip")
    url = f"https://{host}/{b.pick('public', 'docs', 'media')}/{doc}"
    folder = b.pick("/Shared", "/Finance", "/Marketing")
    b.user(b.pick(f"Save the file at {url} into {folder}.",
                  f"Import {url} to my {folder} folder please."))
    out = b.call("import_from_url", {"url": url, "destination": folder})
    b.say(f"Saved {out['name']} in {folder}.")
    if b.chance(0.5):
        b.user(b.pick("Now create a link to it that lasts a week.",
                      "Make a share link for that file, 7 days."), kind="anaphora")
        link_out = b.call("create_share_link", {"file_id": out["file_id"],
                                                "expires_in_days": 7},
                          derived={"expires_in_days": "a week"})
        b.say(f"Link: {link_out['url']}")


def vague_share(b: Builder) -> None:
    b.user(b.pick("Share my presentation with the new designer.",
                  "Give the contractor access to the document.",
                  "Send the file to my colleague."),
           kind="vague_request", label="ask_user", missing=["file_id", "email"])
    b.ask("Which file do you mean, and what is their email address?")
    f = _file(b)
    email = _email(b)
    role, said = b.pick(("viewer", "view only"), ("editor", "they should be able to edit"),
                        ("commenter", "comments only"))
    b.user(b.pick(f"'{f['name']}', and it's {email}; {said}.",
                  f"The {_stem(f['name'])} one - {email}, {said}."), kind="answer")
    fid = _find_in_history(b, f)
    b.call("share_file", {"file_id": fid, "email": email, "role": role})
    b.say(f"Shared {f['name']} with {email} as {role}.")


def _find_in_history(b: Builder, f: dict[str, Any]) -> str:
    out = b.call("search_files", {"keyword": _stem(f["name"])}, reuse=True)
    return str(next(x["file_id"] for x in out["files"] if x["name"] == f["name"]))


def cleanup(b: Builder) -> None:
    f = _file(b)
    b.user(b.pick(f"Delete '{f['name']}'.", f"Bin the {_stem(f['name'])} file, I don't need "
                  "it."))
    fid = _find(b, f)
    b.ask(f"I found {f['name']} in {f['folder']}. Delete it?")
    b.user(b.pick("Yes, that's correct.", "Yes.", "Yep, delete it."), kind="confirm")
    b.call("delete_file", {"file_id": fid})
    b.say(f"{f['name']} is in the bin (restorable for 30 days).")


DOMAIN = Domain(
    name="files",
    service="Cirrus Drive",
    tools=TOOLS,
    backend=FilesBackend,
    scenarios={"share": share, "link": link, "organise": organise, "rename": rename,
               "import_url": import_url, "vague_share": vague_share, "cleanup": cleanup},
    infeasible=(
        Infeasible(("Convert the budget spreadsheet to a PDF.",
                    "Turn that Word file into a PDF for me."),
                   "I can't convert file formats; I can only organise and share files."),
        Infeasible(("Summarise what's in the supplier contract.",
                    "Read the proposal and tell me the main points."),
                   "I can't open or read file contents, only manage the files."),
        Infeasible(("Upgrade my storage plan to 2 TB.", "Buy more storage space."),
                   "Plan changes aren't possible with my tools; please use the billing page."),
        Infeasible(("Restore the version of the roadmap from last Tuesday.",
                    "Show me the edit history of the floor plan."),
                   "I have no access to file versions or history."),
    ),
)

__all__ = ["DOMAIN", "TOOLS", "FilesBackend"]
