"""`sage.score(questions, answer_fn)`: any Python function is the model under test (the SaGE
library's `score(questions, get_response, use_rots=True)`), through the same paraphrase stage, RoT
stage, generation cache, scoring and files as every backend (`generate_and_score`)."""
from __future__ import annotations

from pathlib import Path

from sage.data.questions import questions_frame, read_questions
from sage.generation.callable_backend import register_function
from sage.pipeline.pipeline_config import ModelRole, PipelineConfig, default_run_dir
from sage.pipeline.generate_and_score import generate_and_score
from sage.scoring import ScoreConfig, ScoreResult

DEFAULT_PARAPHRASER = "smollm2-135m"  # the bundled generator: the function under test only answers


def score(questions, answer_fn, rot_fn=None, *, name: str = "python-function", batch: bool = False,
          use_rots: bool = True, config: PipelineConfig | None = None, score_config: ScoreConfig | None = None,
          progress: bool = True, **options) -> ScoreResult:
    """Score the consistency of `answer_fn(question) -> str` (with `batch=True`:
    `answer_fn(questions) -> list[str]`) on `questions` (a list of strings, a table with a `question`
    column, or a questions file). Its cache entries are keyed by `name`, so give a new name when the
    function changes. RoTs come from `rot_fn(question, answer) -> str` when given, else from the RoT
    model (default: the paraphraser); `use_rots=False` scores the answers only.

    `options` are pipeline settings by their flat names (`sage.pipeline.pipeline_config.FLAT_NAMES`, e.g.
    `paraphrases` (K, the flat `k`), `samples`, `paraphraser` (default: the bundled SmolLM2-135M),
    `rot_model`, `min_parascore`, `seed`, `device`, `cache_path`) and `out_dir` (default
    `runs/<name>`; a rerun resumes there); `config` a whole `PipelineConfig` to start from.
    Returns the `ScoreResult`; questions, responses, edges and the summary are written to `out_dir`."""
    register_function(name, answer_fn, batch=batch)
    options.setdefault("out_dir", default_run_dir(name))
    options["out_dir"] = str(options["out_dir"])
    if "paraphrases" in options:
        options["k"] = options.pop("paraphrases")
    cfg = (config or PipelineConfig()).with_flat(**options)
    paraphraser = cfg.paraphraser if cfg.paraphraser.name else ModelRole(DEFAULT_PARAPHRASER, cfg.paraphraser.backend)
    rot_model = cfg.rot_model if cfg.rot_model.name else paraphraser
    if rot_fn is not None:
        rot_model = ModelRole(register_function(f"{name}:rot", rot_fn, batch=batch), "callable")
    cfg = cfg.with_flat(model=ModelRole(name, "callable"), paraphraser=paraphraser, rot_model=rot_model,
                        rots=use_rots)
    table = read_questions(questions) if isinstance(questions, (str, Path)) else questions_frame(questions)
    return generate_and_score(cfg, score_config or ScoreConfig(seed=cfg.seed), questions_table=table,
                              progress=progress)
