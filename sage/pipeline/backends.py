"""The backends of one generation run: one cached backend per (model, backend, prompt format),
shared by the stages, built where the run's executor puts them."""
from __future__ import annotations

from sage.executors import make_executor
from sage.generation.factory import make_backend
from sage.generation.model_specs import resolve_model
from sage.pipeline.pipeline_config import ModelRole, PipelineConfig


class RunBackends:
    def __init__(self, cfg: PipelineConfig, executor=None):
        self.cfg = cfg
        self._made: dict = {}
        self._own_executor = executor is None
        self.executor = make_executor(executor or cfg.executor, cfg.executor_options)

    def get(self, role: ModelRole):
        spec = resolve_model(role.name, backend=role.backend, prompt_format=role.prompt_format)
        key = (spec.model_id, spec.backend, spec.prompt_format)
        if key not in self._made:
            self._made[key] = (spec, make_backend(spec, self.cfg.backend, cache_path=self.cfg.cache_path,
                                                  executor=self.executor))
        return self._made[key]

    def model_under_test(self):
        # --base-url without --backend means the model under test is served by those servers.
        role = self.cfg.model
        if role.backend is None and self.cfg.backend.base_urls:
            role = ModelRole(role.name, "openai", role.prompt_format)
        return self.get(role)

    def paraphraser(self):
        if self.cfg.paraphraser.name is None:
            return self.model_under_test()
        return self.get(self.cfg.paraphraser)

    def rot_writer(self):
        if self.cfg.rot_model.name is None:
            return self.paraphraser()
        return self.get(self.cfg.rot_model)

    def calls(self) -> int:
        return sum(b.calls for _, b in self._made.values())

    def close(self) -> None:
        for _, b in self._made.values():
            b.close()
        self._made.clear()
        if self._own_executor:
            self.executor.close()
