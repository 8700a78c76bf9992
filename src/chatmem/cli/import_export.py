"""``chatmem export`` and ``chatmem import``: memories as JSON lines (records with their
vectors), and import's progress bar.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.progress import BarColumn, Progress, Task, TextColumn, TimeRemainingColumn
from rich.text import Text

from chatmem.cli.console import count, err, out
from chatmem.cli.options import OwnerOption
from chatmem.cli.store import open_memory, scope
from chatmem.embeddings import Embedder
from chatmem.errors import ValidationError
from chatmem.records import Vector


def export(
    user: OwnerOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default stdout).")
    ] = None,
) -> None:
    """Write memories as JSON lines (records with vectors); `import` reads them back."""
    if output is not None:
        _check_output(output)
    where = scope(user)
    with open_memory() as memory:
        if output is None:
            written = memory.export_jsonl(where, sys.stdout)
        else:
            with output.open("w", encoding="utf-8") as handle:
                written = memory.export_jsonl(where, handle)
    err.print(f"exported {count(written)}")


def _check_output(output: Path) -> None:
    if output.is_dir():
        raise ValidationError(f"{output} is a folder; give a file name", field="--output")
    if not output.parent.is_dir():
        raise ValidationError(f"no folder {output.parent}", field="--output")


class OnConflict(enum.StrEnum):
    """What ``import`` does with a memory whose id its user already holds."""

    FAIL = "fail"
    SKIP = "skip"
    REPLACE = "replace"


def import_file(
    file: Annotated[str, typer.Argument(help="A JSONL file written by export, or - for stdin.")],
    on_conflict: Annotated[
        OnConflict,
        typer.Option(
            "--on-conflict",
            help="A memory already stored: fail (nothing is imported), skip it, or replace it.",
        ),
    ] = OnConflict.FAIL,
) -> None:
    """Store every memory of an export file; all or nothing."""
    lines = _read_lines(file)
    entries = sum(1 for line in lines if line.strip())
    with (
        _ImportProgress() as shown,
        open_memory(create=True, wrap_embedder=shown.embedder) as memory,
    ):
        try:
            imported = memory.import_jsonl(shown.reading(lines), on_conflict=on_conflict.value)
        except ValidationError as exc:
            if exc.field == "id" and "already exists" in exc.message:
                hint = "; nothing was imported (--on-conflict skip or replace)"
                raise ValidationError(exc.message + hint, field="id") from None
            raise
    message = f"imported {count(imported)}"
    if on_conflict is OnConflict.SKIP and entries > imported:
        message += f", skipped {entries - imported} already stored"
    out.print(message)


def _read_lines(file: str) -> list[str]:
    """The lines of ``file`` (``-``: stdin), which must be UTF-8 text."""
    data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        name = "stdin" if file == "-" else file
        raise ValidationError(
            f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


class _ImportProgress:
    """Import's progress bar, on stderr and only on a terminal: the lines read, then the
    texts embedded (the lines that came without a vector), each with a count and the time
    left; then the one write, which has no count."""

    #: Texts embedded between two moves of the bar.
    BATCH = 256

    def __init__(self) -> None:
        self._bar = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            _CountAndTimeLeft(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        )
        self._task = self._bar.add_task("reading", total=None, unit="lines")

    def __enter__(self) -> _ImportProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def reading(self, lines: Sequence[str]) -> Iterator[str]:
        """Hand ``lines`` on, counting them as the import reads them."""
        self._stage("reading", len(lines), "lines")
        for line in lines:
            yield line
            self._bar.advance(self._task)
        self._stage("storing", None, "")

    def embedder(self, inner: Embedder) -> Embedder:
        """``inner``, embedding in batches that move the bar."""
        return _CountedEmbedder(inner, self)

    def embedding(self, texts: Sequence[str], embed: Callable[[Sequence[str]], Vector]) -> Vector:
        self._stage("embedding", len(texts), "texts")
        rows = []
        for start in range(0, len(texts), self.BATCH):
            rows.append(embed(texts[start : start + self.BATCH]))
            self._bar.advance(self._task, len(rows[-1]))
        self._stage("storing", None, "")
        return np.concatenate(rows) if rows else embed(texts)

    def _stage(self, name: str, total: int | None, unit: str) -> None:
        # A new task, not a reset: a reset keeps the old total and the old speed.
        self._bar.remove_task(self._task)
        self._task = self._bar.add_task(name, total=total, unit=unit)


class _CountedEmbedder:
    """An embedder that reports to an ``_ImportProgress`` what it embeds."""

    def __init__(self, inner: Embedder, progress: _ImportProgress) -> None:
        self._inner = inner
        self._progress = progress

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> Vector:
        return self._progress.embedding(texts, self._inner.embed)


class _CountAndTimeLeft(TimeRemainingColumn):
    """``120/3000 texts 0:00:14``; nothing for a stage with no count."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        done = f"{int(task.completed)}/{int(task.total)} {task.fields['unit']} "
        return Text.assemble((done, "progress.download"), super().render(task))


__all__ = ["OnConflict", "export", "import_file"]
