"""What to record next to every result: versions, git hash, machine, time."""
from __future__ import annotations

import datetime as _dt
import platform
import subprocess
from importlib import metadata
from pathlib import Path

TRACKED_PACKAGES = (
    "sage-consistency", "torch", "transformers", "sentence-transformers", "bert-score", "rouge-score",
    "nltk", "numpy", "scipy", "pandas", "networkx", "scikit-learn", "peft", "openai", "llama-cpp-python",
    "vllm", "gguf",
)


def package_versions(names=TRACKED_PACKAGES) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_revision(start: Path | None = None) -> str | None:
    """Commit hash of the repository holding the sage sources (or `start`), '+dirty' if modified."""
    where = start or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(seed: int | None = None) -> dict:
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git": git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "seed": seed,
        "versions": package_versions(),
    }
