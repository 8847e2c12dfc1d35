"""The consistency pipeline: paraphrases -> answers -> Rules of Thumb -> scoring.

- `config`: one typed config per stage, nested in `PipelineConfig`;
- `paraphrase_stage`, `stages`: the paraphrase stage (few-shot candidates, ParaScore filter) and
  the answer and RoT stages, each resumable (records) through the generation cache;
- `backends`: the backends of one run; `run`: `run_pipeline` and the three stage functions
  (`sage generate`); `generate_and_score`: generation then scoring, the one path of
  `sage score --model` and of `score`; `python_api`: `score(questions, answer_fn)`.
"""
from sage.pipeline.pipeline_config import (
           AnswerConfig,
           ModelRole,
           ParaScoreConfig,
           PipelineConfig,
           RotConfig,
)
from sage.pipeline.generate_and_score import generate_and_score
from sage.pipeline.paraphrase_stage import ParaphraseConfig
from sage.pipeline.python_api import score
from sage.pipeline.run import (
           generate_answers,
           generate_paraphrases,
           generate_rots,
           load_table,
           run_pipeline,
)

__all__ = ["AnswerConfig", "ModelRole", "ParaScoreConfig", "ParaphraseConfig", "PipelineConfig", "RotConfig",
           "generate_and_score", "generate_answers", "generate_paraphrases", "generate_rots", "load_table",
           "run_pipeline", "score"]
