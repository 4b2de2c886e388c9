"""Files and folders noumena writes are private to its user: labels, reasons and messages are in the
event log and the evidence files, and keys.sqlite holds the data keys that unseal them.

`make_private(home)` runs before anything is written: the process's umask becomes 0o077, so every file any part
(SQLite, DuckDB, the evidence writer, exports, rejects) creates is 0600 and every folder 0700, without each writer
having to remember. A home that already exists with looser modes (from an earlier version, or made by hand) is
reported with a warning naming what is open and the command that closes it; nothing is changed behind the
operator's back.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)
PRIVATE_UMASK = 0o077
CHECKED_ENTRIES = 200
"""How many entries at the top of the home are looked at (the home itself always is)."""


def make_private(home: Path) -> list[Path]:
    """Set the umask, create `home` as 0700 if missing, and return (and warn about) what in it is group- or
    world-accessible."""
    os.umask(PRIVATE_UMASK)
    if not home.exists():
        home.mkdir(mode=0o700, parents=True)
        return []
    open_paths = too_open(home)
    if open_paths:
        shown = ", ".join(f"{p} ({stat.filemode(p.stat().st_mode)})" for p in open_paths[:5])
        more = f" and {len(open_paths) - 5} more" if len(open_paths) > 5 else ""
        log.warning("the noumena home is readable by other users: %s%s; close it with: chmod -R go-rwx %s",
                    shown, more, home)
    return open_paths


def too_open(home: Path) -> list[Path]:
    """The home and the entries at its top (and one level down) whose mode gives group or others any access."""
    found: list[Path] = []
    candidates = [home]
    try:
        for index, entry in enumerate(sorted(home.iterdir())):
            if index >= CHECKED_ENTRIES:
                break
            candidates.append(entry)
            if entry.is_dir() and not entry.is_symlink():
                candidates.extend(sorted(entry.iterdir())[:CHECKED_ENTRIES])
    except OSError:
        pass
    for path in candidates:
        try:
            if path.lstat().st_mode & 0o077 and not path.is_symlink():
                found.append(path)
        except OSError:
            continue
    return found
