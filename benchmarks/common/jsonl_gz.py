"""Gzip'd JSON-lines archives that survive a killed writer: each append is one new gzip member, and a member cut
short by a kill is cut off before the next append (the benchmarks' archives of tuning records)."""
from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Sizes of archives this process left ending on a whole gzip member, so appending need not check them again.
_WHOLE_SIZE: dict[Path, int] = {}


def _end_of_whole_members(path: Path) -> int:
    """The byte offset where the last whole gzip member of `path` ends (0 if none is whole)."""
    end = pos = 0
    decompressor = zlib.decompressobj(wbits=31)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            while chunk:
                try:
                    decompressor.decompress(chunk)
                except zlib.error:
                    return end
                if not decompressor.eof:
                    pos += len(chunk)
                    break
                pos += len(chunk) - len(decompressor.unused_data)
                end, chunk = pos, decompressor.unused_data
                decompressor = zlib.decompressobj(wbits=31)
    return end


def append_json_lines_gz(path: Path, entries: Iterable[dict[str, Any]]) -> None:
    """Append `entries` to a gzip'd JSON-lines file as one new gzip member (the benchmarks' archives of tuning
    records): a process killed while appending loses at most that member. A member cut short by such a kill is
    cut off before appending, since a gzip reader cannot get past it to the members that would follow."""
    lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries)
    if not lines:
        return
    path = Path(path)
    size = path.stat().st_size if path.is_file() else 0
    if size and _WHOLE_SIZE.get(path.resolve()) != size:
        end = _end_of_whole_members(path)
        if end < size:
            logger.warning("%s: dropping %d bytes of a last entry cut short (a killed "
                                                "process), so that new entries can be read", path, size - end)
            with open(path, "r+b") as f:
                f.truncate(end)
    with gzip.open(path, "at", encoding="utf-8") as f:
        f.write(lines)
    _WHOLE_SIZE[path.resolve()] = path.stat().st_size


def read_json_lines_gz(path: Path) -> list[dict[str, Any]]:
    """Every whole entry of a file `append_json_lines_gz` wrote; [] for no file. A last member cut short by a
    kill is dropped, not fatal: everything before it is returned."""
    entries: list[dict[str, Any]] = []
    if not Path(path).is_file():
        return entries
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                entries.append(json.loads(line))
    except (EOFError, json.JSONDecodeError, zlib.error, gzip.BadGzipFile):
        pass
    return entries


