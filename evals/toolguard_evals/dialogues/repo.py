"""Code hosting: repositories, branches, issues, pull requests, collaborators, webhooks."""

from __future__ import annotations

from typing import Any

from toolguard_evals.dialogues.framework import (
    Backend,
    Builder,
    Domain,
    Infeasible,
    Param,
    ToolError,
    choice,
    integer,
    text,
    tool,
)
from toolguard_evals.dialogues.pools import USER_WORDS, person

_REPO = text("Repository as owner/name, e.g. hpike/ledger-api.", "identifier")
_EVENTS = ("push", "pull_request", "issues", "release")
TOOLS = (
    tool("search_repositories", "Repositories whose name contains the keyword.", "read",
         "find", ["keyword"], keyword=text("Part of the repository name.", "keyword")),
    tool("create_branch", "Create a branch from another branch.", "write", "branches",
         ["repo", "branch_name", "from_branch"], repo=_REPO,
         branch_name=text("New branch name.", "code"),
         from_branch=text("Branch to start from.", "code")),
    tool("open_issue", "Open an issue.", "write", "issues", ["repo", "title", "body"],
         repo=_REPO, title=text("Issue title.", "title"),
         body=text("Issue description.", "free_text"),
         label=choice("Label.", "bug", "enhancement", "question", "docs")),
    tool("comment_on_issue", "Add a comment to an issue.", "write", "issues",
         ["repo", "issue_number", "body"], repo=_REPO,
         issue_number=integer("Issue number.", "identifier", minimum=1),
         body=text("Comment text.", "free_text")),
    tool("list_pull_requests", "Pull requests of a repository.", "read", "pulls", ["repo"],
         repo=_REPO, state=choice("Which ones.", "open", "closed", "all", default="open")),
    tool("merge_pull_request", "Merge a pull request.", "write", "pulls",
         ["repo", "pr_number", "method"], repo=_REPO,
         pr_number=integer("Pull request number.", "identifier", minimum=1),
         method=choice("Merge method.", "merge", "squash", "rebase")),
    tool("add_collaborator", "Give a user access to a repository.", "write", "access",
         ["repo", "username", "permission"], repo=_REPO,
         username=text("The user's handle on the platform.", "username"),
         permission=choice("Access level.", "read", "triage", "write", "admin")),
    tool("create_webhook", "Send repository events to a URL.", "write", "hooks",
         ["repo", "url", "events"], repo=_REPO,
         url=text("Receiver URL (https).", "url", fmt="uri"),
         events=Param("array", "Events to send.", None,
                      items={"type": "string", "enum": list(_EVENTS)})),
)

_NAMES = ("ledger-api", "billing-service", "mobile-app", "design-tokens", "data-pipeline",
          "docs-site", "auth-gateway", "search-indexer")
_ORG = "hpike"
_PR_TITLES = ("Fix rounding in invoices", "Add CSV export", "Bump dependencies",
              "Refactor login flow", "Improve error messages", "Cache search results")


class RepoBackend(Backend):
    """Six repositories of one organisation with open pull requests."""

    def setup(self) -> None:
        r = self.rng
        repos = {}
        for name in r.sample(_NAMES, 6):
            full = f"{_ORG}/{name}"
            prs = {}
            for n in sorted(r.sample(range(10, 400), 3)):
                prs[str(n)] = {"number": n, "title": r.choice(_PR_TITLES), "state": "open"}
            repos[full] = {"branches": ["main", "develop"], "issues": {}, "prs": prs,
                           "collaborators": {}, "hooks": []}
        self.s = {"repos": repos}

    def _repo(self, repo: str) -> dict[str, Any]:
        x: dict[str, Any] | None = self.s["repos"].get(repo)
        if x is None:
            raise ToolError(f"no repository {repo}")
        return x

    def do_search_repositories(self, keyword: str) -> dict[str, Any]:
        k = keyword.casefold()
        return {"repositories": [{"repo": n, "default_branch": "main"}
                                 for n in self.s["repos"] if k in n.casefold()]}

    def do_create_branch(self, repo: str, branch_name: str, from_branch: str) -> dict[str, Any]:
        x = self._repo(repo)
        if from_branch not in x["branches"]:
            raise ToolError(f"no branch {from_branch}")
        if branch_name in x["branches"]:
            raise ToolError(f"branch {branch_name} exists")
        x["branches"].append(branch_name)
        return {"repo": repo, "branch": branch_name, "from": from_branch}

    def do_open_issue(self, repo: str, title: str, body: str,
                      label: str | None = None) -> dict[str, Any]:
        x = self._repo(repo)
        n = 400 + len(x["issues"]) + self.rng.randrange(1, 60)
        x["issues"][str(n)] = {"title": title, "body": body, "label": label, "comments": []}
        return {"repo": repo, "issue_number": n, "url": f"https://code.hpike.example/{repo}/"
                                                        f"issues/{n}"}

    def do_comment_on_issue(self, repo: str, issue_number: int, body: str) -> dict[str, Any]:
        issue = self._repo(repo)["issues"].get(str(issue_number))
        if issue is None:
            raise ToolError(f"no issue #{issue_number}")
        issue["comments"].append(body)
        return {"repo": repo, "issue_number": issue_number, "comments": len(issue["comments"])}

    def do_list_pull_requests(self, repo: str, state: str = "open") -> dict[str, Any]:
        x = self._repo(repo)
        return {"repo": repo, "pull_requests": [dict(p) for p in x["prs"].values()
                                                if state in ("all", p["state"])]}

    def do_merge_pull_request(self, repo: str, pr_number: int, method: str) -> dict[str, Any]:
        pr = self._repo(repo)["prs"].get(str(pr_number))
        if pr is None or pr["state"] != "open":
            raise ToolError(f"no open pull request #{pr_number}")
        pr["state"] = "merged"
        return {"repo": repo, "pr_number": pr_number, "merged": True, "method": method}

    def do_add_collaborator(self, repo: str, username: str, permission: str) -> dict[str, Any]:
        self._repo(repo)["collaborators"][username] = permission
        return {"repo": repo, "invited": username, "permission": permission}

    def do_create_webhook(self, repo: str, url: str, events: list[str]) -> dict[str, Any]:
        if not url.startswith("https://"):
            raise ToolError("webhook URLs must use https")
        hid = self.rng.randrange(10000, 99999)
        self._repo(repo)["hooks"].append({"id": hid, "url": url, "events": events})
        return {"repo": repo, "hook_id": hid, "events": events}


# ============================================================================ scenarios
def _name(b: Builder) -> str:
    return str(b.fresh("repo", list(b.backend.s["repos"]))).split("/")[1]


def _full(b: Builder, name: str) -> str:
    """The repository's full name: said by the user, or found by a search."""
    full = f"{_ORG}/{name}"
    if full in b.last_user:
        return full
    out = b.call("search_repositories", {"keyword": name}, reuse=True)
    return str(out["repositories"][0]["repo"])


def _handle(b: Builder) -> str:
    f, la = person(b.rng.randrange(1000))
    return str(b.pick(f"{f.lower()}-{la.lower()}", f"{la.lower()}{b.rng.randrange(1, 99)}",
                      f"{b.pick(*USER_WORDS)}-{f.lower()}"))


def collaborator(b: Builder) -> None:
    name = _name(b)
    handle = _handle(b)
    perm, said = b.pick(("write", "write access"), ("read", "read-only access"),
                        ("admin", "admin rights"), ("triage", "triage permissions"))
    where = b.pick(name, f"{_ORG}/{name}")
    b.user(b.pick(f"Give {handle} {said} to {where}.", f"Add user {handle} to the {where} "
                  f"repo with {said}."))
    repo = _full(b, name)
    b.call("add_collaborator", {"repo": repo, "username": handle, "permission": perm},
           derived={"repo": None if repo in b.last_user else "found by search"})
    b.say(f"Invited {handle} to {repo} ({perm}).")
    if b.chance(0.4):
        other = _handle(b)
        b.user(b.pick(f"Do the same for {other}.", f"And {other} as well."), kind="anaphora")
        b.call("add_collaborator", {"repo": repo, "username": other, "permission": perm},
               derived={"permission": "same as before"})
        b.say(f"{other} is invited too.")


def vague_collaborator(b: Builder) -> None:
    b.user(b.pick("Add my new teammate to the repo.", "Give the contractor access to our "
                  "code.", "Invite the new developer."),
           kind="vague_request", label="ask_user", missing=["repo", "username"])
    b.ask("Sure - which repository, what's their username, and what access should they get?")
    name, handle = _name(b), _handle(b)
    perm, said = b.pick(("write", "write"), ("read", "read only"), ("triage", "triage"))
    b.user(b.pick(f"{name}, user {handle}, {said}.", f"It's {handle} for {name}; {said} "
                  "access."), kind="answer")
    repo = _full(b, name)
    b.call("add_collaborator", {"repo": repo, "username": handle, "permission": perm},
           derived={"repo": "found by search"})
    b.say(f"Invited {handle} to {repo}.")


def _hook_url(b: Builder, name: str) -> str:
    host = b.pick("ci.quarrylabs.example", "hooks.beaconops.example", "deploy.lanthorn.example")
    return f"https://{host}/{b.pick('hooks', 'events', 'notify')}/{name}"


def webhook(b: Builder) -> None:
    name = _name(b)
    url = _hook_url(b, name)
    events, said = b.pick((["push"], "push events"), (["pull_request"], "pull request events"),
                          (["push", "release"], "pushes and releases"))
    b.user(b.pick(f"Send {said} of {name} to {url}.", f"Create a webhook on {name} for "
                  f"{said}, target {url}."))
    repo = _full(b, name)
    out = b.call("create_webhook", {"repo": repo, "url": url, "events": events},
                 derived={"events": said})
    b.say(f"Webhook {out['hook_id']} sends {', '.join(events)} to {url}.")


def vague_webhook(b: Builder) -> None:
    name = _name(b)
    b.user(b.pick(f"Set up a webhook for {name}.", f"I need {name} to notify our CI."),
           kind="vague_request", label="ask_user", missing=["url", "events"])
    b.ask("Which URL should receive the events, and which events (push, pull requests, "
          "issues, releases)?")
    url = _hook_url(b, name)
    b.user(b.pick(f"{url}, just pushes.", f"Use {url} - push events only."), kind="answer")
    repo = _full_from_history(b, name)
    b.call("create_webhook", {"repo": repo, "url": url, "events": ["push"]},
           derived={"events": "pushes"})
    b.say(f"Done: push events of {repo} go to {url}.")


def _full_from_history(b: Builder, name: str) -> str:
    out = b.call("search_repositories", {"keyword": name}, reuse=True)
    return str(out["repositories"][0]["repo"])


def issue(b: Builder) -> None:
    name = _name(b)
    title, body = b.pick(
        ("Login page times out", "The login page spins for 30 seconds and then fails."),
        ("Export drops the last row", "CSV export leaves out the final line of the table."),
        ("Typo on pricing page", "It says 'anual' instead of 'annual'."),
        ("Crash when the cart is empty", "Opening checkout with an empty cart crashes the app."))
    label = "docs" if "Typo" in title else "bug"
    b.user(b.pick(f"Open an issue in {name} titled '{title}': {body}",
                  f"File a bug on {name}. Title: {title}. Details: {body}"))
    repo = _full(b, name)
    out = b.call("open_issue", {"repo": repo, "title": title, "body": body, "label": label},
                 derived={"repo": "found by search"})
    b.say(f"Opened #{out['issue_number']}: {out['url']}")
    if b.chance(0.5):
        note = b.pick("it also happens on mobile", "version 2.3.1 is affected",
                      "a workaround is to reload the page")
        b.user(b.pick(f"Add a comment that {note}.", f"Comment on it: {note}."),
               kind="anaphora")
        b.call("comment_on_issue", {"repo": repo, "issue_number": out["issue_number"],
                                    "body": note[0].upper() + note[1:] + "."},
               derived={"body": "the user's note"})
        b.say("Comment added.")


def branch(b: Builder) -> None:
    name = _name(b)
    new = b.pick("feature/export-csv", "fix/login-timeout", "chore/bump-deps",
                 "release/2026.4")
    base = b.pick("main", "develop")
    b.user(b.pick(f"Create a branch {new} from {base} in {name}.",
                  f"In {name}, branch off {base} as {new}."))
    repo = _full(b, name)
    b.call("create_branch", {"repo": repo, "branch_name": new, "from_branch": base},
           derived={"repo": "found by search"})
    b.say(f"Created {new} from {base} in {repo}.")


def merge(b: Builder) -> None:
    name = _name(b)
    b.user(b.pick(f"What pull requests are open in {name}?", f"List open PRs of {name}."))
    repo = _full(b, name)
    out = b.call("list_pull_requests", {"repo": repo, "state": "open"})
    prs = out["pull_requests"]
    b.ask("Open: " + "; ".join(f"#{p['number']} {p['title']}" for p in prs) + ". Merge one?")
    idx = b.pick(0, 1, 2)
    method, said = b.pick(("squash", "Squash-merge"), ("merge", "Merge"), ("rebase", "Rebase"))
    pr = prs[idx]
    b.user(b.pick(f"{said} the {('first', 'second', 'third')[idx]} one.",
                  f"{said} #{pr['number']}."), kind="select")
    b.call("merge_pull_request", {"repo": repo, "pr_number": pr["number"], "method": method},
           derived={"method": said})
    b.say(f"Merged #{pr['number']} ({method}).")


DOMAIN = Domain(
    name="repo",
    service="the Halvorsen & Pike code hosting",
    tools=TOOLS,
    backend=RepoBackend,
    scenarios={"collaborator": collaborator, "vague_collaborator": vague_collaborator,
               "webhook": webhook, "vague_webhook": vague_webhook, "issue": issue,
               "branch": branch, "merge": merge},
    infeasible=(
        Infeasible(("Run the test suite on main for me.", "Trigger a CI build now."),
                   "I can't run builds or tests; CI runs on its own after pushes."),
        Infeasible(("Review the code in the newest pull request and tell me if it's good.",
                    "Is this PR safe to ship? Read the diff."),
                   "I can't read or review code changes with my tools."),
        Infeasible(("Make the ledger-api repo public.", "Change the repo visibility to "
                                                        "private."),
                   "Visibility settings aren't available to me."),
        Infeasible(("Delete the old branches everywhere.", "Archive all repos we haven't "
                                                           "touched this year."),
                   "I have no tools for deleting branches or archiving repositories."),
    ),
)

__all__ = ["DOMAIN", "TOOLS", "RepoBackend"]
