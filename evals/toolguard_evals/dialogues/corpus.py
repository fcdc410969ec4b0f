"""Build the dialogue corpus: every domain's scenario templates, drawn from one seed.

Dialogue ``k`` of a domain uses ``random.Random(f"{seed}:{domain}:{k}")`` for every choice
and the same string seeds its backend, so a dialogue does not depend on the others or on
``per_domain``.  Its main scenario is ``scenarios[k % n]``; with probability 0.45 a second,
different scenario follows in the same conversation (shared session and state), and with
probability 0.4 a request that no tool can serve is put before, between or after them.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from toolguard_evals.dialogues.framework import Builder, Domain
from toolguard_evals.dialogues.records import Corpus, Dialogue

DEFAULT_PER_DOMAIN = 36
"""Dialogues per domain (11 domains: 396 dialogues)."""


@functools.cache
def domains() -> tuple[Domain, ...]:
    """Every domain, in a fixed order."""
    from toolguard_evals.dialogues import (
        banking,
        calendar,
        files,
        helpdesk,
        home,
        mail,
        repo,
        sheets,
        shop,
        stocks,
        travel,
    )

    return tuple(m.DOMAIN for m in (travel, banking, calendar, mail, files, shop, helpdesk,
                                    home, stocks, sheets, repo))


def domain(name: str) -> Domain:
    """The domain named ``name``.

    Raises:
        KeyError: For an unknown name.
    """
    for d in domains():
        if d.name == name:
            return d
    raise KeyError(f"unknown domain {name!r}; expected one of {[d.name for d in domains()]}")


def build_dialogue(dom: Domain, index: int, *, seed: int = 0) -> Dialogue:
    """Dialogue ``index`` of ``dom`` (see module docstring)."""
    key = f"{seed}:{dom.name}:{index}"
    b = Builder(dom, f"{dom.name}-{index:03d}", seed=seed, key=key)
    plan_rng = random.Random(f"{key}:plan")
    names = list(dom.scenarios)
    plan = [names[index % len(names)]]
    if plan_rng.random() < 0.45:
        plan.append(plan_rng.choice([n for n in names if n != plan[0]]))
    infeasible_at = plan_rng.randrange(len(plan) + 1) if plan_rng.random() < 0.4 else None
    for i, name in enumerate(plan):
        if infeasible_at == i:
            b.infeasible()
        b.scenarios.append(name)
        dom.scenarios[name](b)
    if infeasible_at == len(plan):
        b.infeasible()
    return b.finish()


def build_corpus(*, seed: int = 0, per_domain: int = DEFAULT_PER_DOMAIN,
                 names: Sequence[str] | None = None) -> Corpus:
    """Build the corpus.

    Args:
        seed: Seed of every choice.
        per_domain: Dialogues per domain (>= 1).
        names: Domains to build (default: all).

    Raises:
        ValueError: If ``per_domain`` < 1.
        KeyError: For an unknown domain name.
    """
    if per_domain < 1:
        raise ValueError("per_domain must be >= 1")
    doms = [domain(n) for n in names] if names is not None else list(domains())
    dialogues = [build_dialogue(d, k, seed=seed) for d in doms for k in range(per_domain)]
    return Corpus(seed=seed, tools={d.name: d.docs() for d in doms},
                  effects={d.name: d.effects() for d in doms}, dialogues=dialogues)


__all__ = ["DEFAULT_PER_DOMAIN", "build_corpus", "build_dialogue", "domain", "domains"]
