"""Progress bars: one constructor, so `--no-progress` (TQDM_DISABLE) hides every bar sage draws.

tqdm's own `disable=` argument wins over the TQDM_DISABLE environment variable, so a bar built with
an explicit `disable=False` would show despite `--no-progress`; `progress_bar` decides from both.
"""
from __future__ import annotations

import os


def progress_hidden() -> bool:
    """Progress bars are switched off for this process (`--no-progress`, TQDM_DISABLE=1)."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes")


def progress_bar(iterable=None, *, enabled: bool | None = True, **kwargs):
    """A tqdm bar (`tqdm.auto`); hidden when `enabled` is False or progress is switched off.
    `enabled=None`: tqdm's own choice (hidden when the output is not a terminal)."""
    from tqdm.auto import tqdm

    disable = True if progress_hidden() else (None if enabled is None else not enabled)
    return tqdm(iterable, disable=disable, **kwargs)
