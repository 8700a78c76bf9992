"""The streamed body of an import: export lines gathered into chunks, so a file of any size
is never held whole; from sync lines (``jsonl_chunks``) or sync or async ones
(``async_chunks``).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

#: Bytes of import lines gathered into one chunk of the streamed body.
CHUNK_BYTES = 64 * 1024


class Chunker:
    """Gathers import lines (with or without their newlines) into the chunks of a streamed
    body, so a file of any size is never held whole."""

    def __init__(self, size: int = CHUNK_BYTES) -> None:
        self.size = size
        self._held: list[bytes] = []
        self._bytes = 0

    def add(self, line: str) -> bytes | None:
        """Take a line; a chunk once enough is held."""
        data = (line.rstrip("\r\n") + "\n").encode("utf-8")
        self._held.append(data)
        self._bytes += len(data)
        return self.rest() if self._bytes >= self.size else None

    def rest(self) -> bytes:
        """What is held, as a chunk (empty when nothing is)."""
        chunk = b"".join(self._held)
        self._held, self._bytes = [], 0
        return chunk


def jsonl_chunks(lines: Iterable[str]) -> Iterator[bytes]:
    """``lines`` as the chunks of an import body, read one at a time."""
    chunker = Chunker()
    for line in lines:
        chunk = chunker.add(line)
        if chunk is not None:
            yield chunk
    last = chunker.rest()
    if last:
        yield last


async def async_chunks(lines: Iterable[str] | AsyncIterable[str]) -> AsyncIterator[bytes]:
    """``jsonl_chunks`` of sync or async lines."""
    if not isinstance(lines, AsyncIterable):
        for chunk in jsonl_chunks(lines):
            yield chunk
        return
    chunker = Chunker()
    async for line in lines:
        full = chunker.add(line)
        if full is not None:
            yield full
    last = chunker.rest()
    if last:
        yield last


__all__ = ["CHUNK_BYTES", "Chunker", "async_chunks", "jsonl_chunks"]
