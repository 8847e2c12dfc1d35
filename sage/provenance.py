"""What to record next to every result: versions, git hash, machine, time."""
from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from sage.errors import SageInputError
from sage.outputs import write_text

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


# Result files a run appends to (committed under experiments/results/, benchmarks/results/) are
# not code: modifying them must not mark the code that made them '+dirty'.
_NOT_CODE = ":(top,exclude,glob)**/results/**"


def git_revision(start: Path | None = None) -> str | None:
    """Commit hash of the repository holding the sage sources (or `start`), '+dirty' if a tracked
    file outside a `results/` folder is modified."""
    where = start or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ":(top)", _NOT_CODE], cwd=where,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def torch_threads() -> int | None:
    """torch's intra-op thread count where torch is loaded (None otherwise): CPU kernels may split
    sums by thread, so two runs agree bit for bit only at the same count; recorded with each
    result so that a rerun that differs in the last bits can be told why."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def provenance(seed: int | None = None) -> dict:
    return {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git": git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "seed": seed,
        "torch_threads": torch_threads(),
        "versions": package_versions(),
    }


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resume_settings(run_dir: Path, settings: dict, legacy: Path | None = None,
                          name: str = "settings.json") -> None:
    """Results a resumable run appends to `run_dir` depend on `settings`: record them there
    (`name`) on the first run, and refuse a rerun whose settings differ, so results made under
    different settings are never mixed. `legacy`: a JSON file of older runs that holds the same
    keys (read when `name` is absent)."""


    path = Path(run_dir) / name
    current = json.loads(json.dumps(settings, default=str))  # tuples -> lists, as stored
    source = path if path.exists() else legacy if legacy is not None and legacy.exists() else None
    if source is not None:
        try:
            stored = json.loads(source.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SageInputError(f"{source}: unreadable ({exc}); use a new --out directory") from exc
        stored = {k: stored.get(k) for k in current}
        was, now = _flat(stored), _flat(current)
        changed = [f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(was.keys() | now.keys())
                   if was.get(k) != now.get(k)]
        if changed:
            raise SageInputError(
                f"{run_dir}: holds results made with other settings ({'; '.join(changed)}); "
                "use a new --out directory, or delete that directory to start over")
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(current, indent=2) + "\n")
