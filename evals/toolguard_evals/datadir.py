"""Where the harness finds the shared datasets (RelyToolBench, FamilyTool, CRITICTOOL).

Never from the source tree: an installed ``toolguard-evals`` wheel works the same as a
checkout.  In order: the folder a command is given (``--data-dir``), the
``TOOLGUARD_DATA_DIR`` environment variable, then ``../shared/data`` from the working
directory (a checkout with the shared data beside it, as in CI).  The root holds one
folder per dataset: ``relytoolbench/``, ``familytool/``, ``critictool/`` (SOURCES.md).
BFCL's data comes from the ``bfcl-eval`` wheel (:mod:`toolguard_evals.bfcl`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

ENV: Final = "TOOLGUARD_DATA_DIR"
"""Environment variable naming the data root."""
BESIDE_CHECKOUT: Final = Path("..") / "shared" / "data"
"""Relative to the working directory: the data root beside a checkout."""


class DataNotFoundError(FileNotFoundError):
    """A dataset folder is missing; the message says where it looked and what to set."""


def data_root(given: str | Path | None = None) -> Path:
    """The data root: ``given``, else ``$TOOLGUARD_DATA_DIR``, else ``../shared/data``.

    The result may not exist; :func:`dataset_dir` checks.
    """
    if given is not None:
        return Path(given)
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    return BESIDE_CHECKOUT


def dataset_dir(name: str, given: str | Path | None = None) -> Path:
    """The folder of dataset ``name`` (``"relytoolbench"``): ``given`` itself when given.

    Raises:
        DataNotFoundError: The folder does not exist (a ``FileNotFoundError``).
    """
    folder = Path(given) if given is not None else data_root() / name
    if not folder.is_dir():
        where = (f"--data-dir {given}" if given is not None
                 else f"${ENV}={os.environ[ENV]}" if os.environ.get(ENV)
                 else f"{BESIDE_CHECKOUT} (from {Path.cwd()})")
        raise DataNotFoundError(
            f"{name} data not found at {folder} ({where}); pass --data-dir, or set {ENV} to "
            f"the folder that holds {name}/ (see the repository's shared/data/SOURCES.md)")
    return folder
