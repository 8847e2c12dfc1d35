"""Download a model from the Hugging Face hub into the Hugging Face cache, with one-line errors.

Called by `sage.models.resolve` only after a local path, a bundled alias and the local cache have
all missed, and never in offline mode (`--offline`, HF_HUB_OFFLINE=1). The transfer is
`huggingface_hub.snapshot_download`: a progress bar, HF_TOKEN (or `hf auth login`) for
gated models such as Llama-2, a dropped connection resumed with an HTTP Range request, and files
finished by an interrupted run kept, so running again fetches only what is missing. HF_ENDPOINT
points it at a mirror.

Only the weights one loader needs are fetched: when a repository has safetensors, its duplicate
PyTorch `.bin`/`.pt` files and consolidated checkpoints are skipped (for Llama-2-13B that halves
52 GB), and TensorFlow/Flax/ONNX/OpenVINO/GGUF exports are always skipped unless they are the only
weights.
"""
from __future__ import annotations

import fnmatch
import logging
from pathlib import Path

from sage.errors import ModelNotAvailableError

log = logging.getLogger(__name__)

# Exports no loader here reads.
_OTHER_FRAMEWORKS = ("*.h5", "*.msgpack", "*.ot", "*.onnx", "*.onnx_data", "*.tflite", "*.mlmodel",
                     "onnx/*", "openvino/*", "coreml/*", "flax_model*", "tf_model*", "rust_model*")
_TORCH_DUPLICATES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "consolidated*", "original/*")
_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth")


def ignore_patterns(files: list[str]) -> list[str]:
    """Patterns of repository files not to download, given the repository's file list."""
    def has(patterns) -> bool:
        return any(fnmatch.fnmatch(f, p) for f in files for p in patterns)

    patterns = list(_OTHER_FRAMEWORKS)
    if has(("*.safetensors",)):
        patterns += _TORCH_DUPLICATES
    if has(_WEIGHTS):
        patterns.append("*.gguf")
    return patterns


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def explain(exc: BaseException, repo_id: str, what: str) -> str:
    """One line: what went wrong downloading `repo_id`, and what to do."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import get_token

    page = f"{_endpoint()}/{repo_id}"
    token = get_token()
    status = _status(exc)
    if isinstance(exc, GatedRepoError):
        if token is None or status == 401:
            return (f"{what} {repo_id!r} is gated on the Hugging Face hub and needs a token: accept its licence "
                    f"at {page}, then set HF_TOKEN to a token of that account (or run `hf auth login`)")
        return (f"{what} {repo_id!r} is gated and HF_TOKEN has no access to it ({status}): accept its "
                f"licence at {page} with the account that owns the token, or use another token")
    if isinstance(exc, RevisionNotFoundError):
        return f"{what} {repo_id!r}: that revision does not exist on the hub ({page}); check the revision"
    if isinstance(exc, RepositoryNotFoundError):
        hint = ("set HF_TOKEN if it is private or gated" if token is None
                else "check that HF_TOKEN has access if it is private")
        return (f"{what} {repo_id!r} was not found on the hub at {_endpoint()} ({status}): check the id "
                f"(see {page}), or {hint}")
    if isinstance(exc, HfHubHTTPError):
        if status == 401:
            return (f"the hub rejected HF_TOKEN (401) while downloading {what} {repo_id!r}: set a valid "
                    "token (https://huggingface.co/settings/tokens) or unset HF_TOKEN for public models")
        if status == 403:
            return (f"access to {what} {repo_id!r} was refused (403): the token lacks permission for it; "
                    f"check {page} and your token's scopes")
        return (f"the hub answered HTTP {status} while downloading {what} {repo_id!r}; try again later, "
                "or pass a local path")
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return (f"could not download {what} {repo_id!r} from {_endpoint()} ({type(exc).__name__}: {first}); "
            "check the network or proxy (HTTPS_PROXY) and run again (finished files are kept), or pass a "
            "local path (HF_HUB_OFFLINE=1 never touches the network)")


def cached_snapshot(repo_id: str) -> Path | None:
    """The complete local snapshot of `repo_id` in the Hugging Face cache, or None; no network.

    Complete means every file a download by `download_model` would fetch (the cached tree listing,
    filtered by the same patterns), so a snapshot an interrupted download left half done is not
    used but finished by the next download.
    """
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        from huggingface_hub import get_cached_repo_tree

        files = [f.path for f in get_cached_repo_tree(repo_id)]
    except Exception:  # noqa: BLE001  no listing cached (or an older huggingface_hub): taken as is
        files = []
    try:
        return Path(snapshot_download(repo_id, local_files_only=True, ignore_patterns=ignore_patterns(files)))
    except Exception:  # noqa: BLE001  any failure means: not available offline
        return None


def download_model(repo_id: str, *, what: str = "model", revision: str | None = None) -> Path:
    """Download `repo_id` (the files a loader needs) into the Hugging Face cache; its local path."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        info = HfApi().model_info(repo_id, revision=revision)
        files = [s.rfilename for s in (info.siblings or [])]
        log.info("downloading %s %s from %s (%d files; once, into the Hugging Face cache)",
                    what, repo_id, _endpoint(), len(files))
        path = snapshot_download(repo_id, revision=revision, ignore_patterns=ignore_patterns(files))
    except Exception as exc:  # every failure becomes one line; the cause stays chained for -vv
        log.debug("hub download of %s failed", repo_id, exc_info=True)
        raise ModelNotAvailableError(explain(exc, repo_id, what)) from exc
    return Path(path)
