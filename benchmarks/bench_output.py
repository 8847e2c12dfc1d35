"""What every benchmark does with its result: print it as JSON and, with --json PATH, write it there."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def emit(result: dict, path: str | Path | None) -> int:
    """Print `result` as indented JSON and write the same text to `path` (if given); returns the exit
    status 0 for `main`."""
    text = json.dumps(result, indent=2) + "\n"
    sys.stdout.write(text)
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return 0
