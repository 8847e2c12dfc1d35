"""SERAC: semi-parametric editing with a retrieval-augmented counterfactual model (Mitchell et al.,
2022), as published: both learned parts are trained on held-out edits.

- Edit memory: the applied requests (the edit prompts).
- Scope classifier: the bundled MiniLM fine-tuned as a bi-encoder (EasyEdit's SERAC default,
  `cross_attend: False`): P(in scope | edit, query) = sigmoid(a * cos(e(edit), e(query)) + b),
  mean-pooled normalized embeddings, trained with binary cross-entropy on pairs built from the
  held-out entries: (edit prompt, its own prompt / action / relation paraphrases) in scope,
  (edit prompt, its neighbourhood prompts / other entries' prompts) out of scope.
- Counterfactual model: a copy of the base model with LoRA adapters on the linear layers of its
  last `cf_layers` blocks (merged after training), fine-tuned to answer an in-scope query with the
  edit in its context, "<edit prompt> <target_new>\\n<query>" -> target_new (teacher-forced NLL),
  on the held-out entries' edit prompts and paraphrases.
- A query goes to the counterfactual model with the memorized edit the classifier scores highest
  when that score exceeds `threshold`; otherwise to the unchanged base model.

The held-out entries are the other frameworks' entries of the same subset (`EditContext.held_out`);
the classifier's scope accuracy on the entries under test is measured once and reported
(`diagnostics()`, summary.json). Both trained parts are cached on disk by model, training set
and settings. `serac-icl` (serac_icl.py) is the earlier training-light variant.

Sequential editing (`sage edit --sequential`): the edit memory grows, one entry per edit, and
every query is routed over all edits so far (the paper's memory is a growing list too); the
classifier and the counterfactual model are trained once, before the first edit, on held-out
edits (in a sequence: the other subset's entries, never an entry of the sequence).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Sequence

from sage.api import TargetScore, TargetScorer
from sage.data.files import write_json, write_whole
from sage.editing.dataset import EditRequest
from sage.editing.editor_base import EDITORS, EditorBase, HParams, MemoryEdits, check
from sage.editing.generation_measures import greedy_continuations
from sage.editing.handles import WrapperHandle
from sage.editing.key_statistics import model_key
from sage.editing.profiles import profile_for
from sage.editing.target_scoring import LMScorer, target_nll
from sage.errors import SageInputError
from sage.models.resolve import bundled_embedder_path
from sage.progress import progress_bar
from sage.settings import cache_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeracHParams(HParams):
    threshold: float = 0.5  # in scope when P(in scope) exceeds this (as the reference)
    embedder: str = ""  # "" = the bundled all-MiniLM-L6-v2
    cls_epochs: int = 1
    cls_lr: float = 2e-5
    cls_batch: int = 32
    cls_max_pairs: int = 6000  # training pairs sampled from the held-out entries
    cf_layers: int = 8  # LoRA on the linear layers of the last cf_layers blocks
    cf_rank: int = 16
    cf_steps: int = 150
    cf_batch: int = 16
    cf_lr: float = 1e-3

    def __post_init__(self):
        name = type(self).__name__
        check(0 < self.threshold < 1, name, "threshold must be in (0, 1)")
        check(self.cls_epochs >= 1 and self.cls_batch >= 2 and self.cls_max_pairs >= 2, name,
              "cls_epochs >= 1, cls_batch >= 2, cls_max_pairs >= 2")
        check(self.cls_lr > 0 and self.cf_lr > 0, name, "learning rates must be > 0")
        check(self.cf_layers >= 1 and self.cf_rank >= 1, name, "cf_layers >= 1 and cf_rank >= 1")
        check(self.cf_steps >= 0 and self.cf_batch >= 1, name, "cf_steps >= 0 and cf_batch >= 1")


def edit_context(edit: EditRequest, query: str) -> str:
    """The counterfactual model's input: the edit, then the query."""
    return f"{edit.prompt} {edit.target_new}\n{query}"


# --------------------------------------------------------------------------- scope classifier
class ScopeClassifier:
    """A bi-encoder over the bundled sentence encoder with a learned affine map of the cosine."""

    def __init__(self, path: str):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.encoder = AutoModel.from_pretrained(path).eval()
        # start at P = 0.5 for cos = 0.7; training moves both
        self.head = torch.nn.Parameter(torch.tensor([10.0, -7.0]))

    def embed(self, texts: Sequence[str], batch: int = 128):
        import torch

        out = []
        for s in range(0, len(texts), batch):
            enc = self.tokenizer(list(texts[s:s + batch]), padding=True, truncation=True,
                                 max_length=128, return_tensors="pt")
            hidden = self.encoder(**enc).last_hidden_state
            mask = enc.attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # mean pooling
            out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out)

    def logits(self, edits, queries):
        """[len(queries), len(edits)] in-scope logits from embeddings."""
        return self.head[0] * queries @ edits.T + self.head[1]

    def state_dict(self) -> dict:
        return {"encoder": self.encoder.state_dict(), "head": self.head.detach().clone()}

    def load_state_dict(self, state: dict) -> None:
        import torch

        self.encoder.load_state_dict(state["encoder"])
        with torch.no_grad():
            self.head.copy_(state["head"])


def scope_pairs(entries: Sequence[EditRequest], rng: random.Random) -> list[tuple[str, str, int]]:
    """(edit prompt, query, in scope?) pairs: each entry's own prompt and paraphrases in scope;
    its neighbourhood prompts and as many prompts of other entries out of scope."""
    pairs = []
    others = [q for e in entries for q in (e.prompt, *e.action_paraphrases)]
    for e in entries:
        for q in (e.prompt, *e.action_paraphrases, *e.relation_paraphrases):
            pairs.append((e.prompt, q, 1))
        for q in e.neighbourhood:
            pairs.append((e.prompt, q, 0))
        own = {e.prompt, *e.action_paraphrases}
        for q in rng.sample(others, min(len(e.neighbourhood) + len(own), len(others))):
            if q not in own:
                pairs.append((e.prompt, q, 0))
    rng.shuffle(pairs)
    return pairs


def train_scope_classifier(clf: ScopeClassifier, entries: Sequence[EditRequest], hp: SeracHParams) -> dict:
    import torch
    rng = random.Random(hp.seed)
    pairs = scope_pairs(entries, rng)[:hp.cls_max_pairs]
    torch.manual_seed(hp.seed)
    opt = torch.optim.AdamW([{"params": clf.encoder.parameters(), "lr": hp.cls_lr},
                             {"params": [clf.head], "lr": 1e-2}])
    clf.encoder.train()
    losses = []
    steps = hp.cls_epochs * -(-len(pairs) // hp.cls_batch)
    bar = progress_bar(total=steps, desc="SERAC scope classifier", leave=False)
    for epoch in range(hp.cls_epochs):
        order = list(range(len(pairs)))
        random.Random(hp.seed + epoch).shuffle(order)
        for s in range(0, len(order), hp.cls_batch):
            chunk = [pairs[i] for i in order[s:s + hp.cls_batch]]
            a = clf.embed([p[0] for p in chunk])
            q = clf.embed([p[1] for p in chunk])
            logit = clf.head[0] * (a * q).sum(-1) + clf.head[1]
            y = torch.tensor([float(p[2]) for p in chunk])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            bar.update(1)
    bar.close()
    clf.encoder.eval()
    return {"pairs": len(pairs), "steps": len(losses),
            "final_loss": float(sum(losses[-20:]) / len(losses[-20:]))}


def scope_accuracy(clf: ScopeClassifier, entries: Sequence[EditRequest], threshold: float) -> dict:
    """Per prompt kind, the share of an entry's queries the classifier puts in scope of that
    entry's own edit (1 is right for paraphrases, 0 for neighbourhood prompts), and the balanced
    accuracy (mean of paraphrase recall and neighbour rejection)."""
    import torch

    with torch.no_grad():
        edits = clf.embed([e.prompt for e in entries])
        shares = {}
        for kind, field in (("action", "action_paraphrases"), ("relation", "relation_paraphrases"),
                            ("neighbour", "neighbourhood")):
            hits = []
            for i, e in enumerate(entries):
                q = clf.embed(list(getattr(e, field)))
                hits += (torch.sigmoid(clf.logits(edits[i:i + 1], q))[:, 0] > threshold).tolist()
            shares[kind] = float(sum(hits) / len(hits))
    recall = (shares["action"] + shares["relation"]) / 2
    return {"in_scope_action": shares["action"], "in_scope_relation": shares["relation"],
            "in_scope_neighbour": shares["neighbour"],
            "balanced_accuracy": (recall + 1 - shares["neighbour"]) / 2, "n_entries": len(entries)}


# --------------------------------------------------------------------------- counterfactual model
def _lora_targets(model: Any, n_last: int) -> list[str]:
    """Full names of the linear modules in the last `n_last` transformer blocks."""
    import torch


    profile = profile_for(model)
    n = profile.n_layers(model)
    names = []
    for layer in range(max(0, n - n_last), n):
        prefix = f"{profile.layers}.{layer}"
        for sub, mod in profile.layer_module(model, layer).named_modules():
            if isinstance(mod, torch.nn.Linear) or type(mod).__name__ == "Conv1D":
                names.append(f"{prefix}.{sub}")
    return names


def counterfactual_model(lm: Any, hp: SeracHParams, entries: Sequence[EditRequest] | None,
                         adapter_state: dict | None):
    """A copy of the base model with trained (or loaded) LoRA weights merged in. Returns
    (model, adapter state, training info)."""

    import torch
    from peft import LoraConfig, get_peft_model
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict


    model = copy.deepcopy(lm.model)
    torch.manual_seed(hp.seed)
    config = LoraConfig(r=hp.cf_rank, lora_alpha=2 * hp.cf_rank, lora_dropout=0.0, bias="none",
                        target_modules=_lora_targets(model, hp.cf_layers),
                        fan_in_fan_out=profile_for(model).conv1d)
    peft_model = get_peft_model(model, config)
    info: dict = {}
    if adapter_state is not None:
        set_peft_model_state_dict(peft_model, adapter_state)
    else:
        examples = [(edit_context(e, q), e.target_new) for e in entries
                    for q in (e.prompt, *e.action_paraphrases, *e.relation_paraphrases)]
        rng = random.Random(hp.seed)
        rng.shuffle(examples)
        opt = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=hp.cf_lr)
        peft_model.train()
        losses = []
        for step in progress_bar(range(hp.cf_steps), desc="SERAC counterfactual model", leave=False):
            at = (step * hp.cf_batch) % len(examples)
            chunk = (examples + examples)[at:at + hp.cf_batch]
            # the adapters live in `model` now (peft injects them in place)
            loss = target_nll(model, lm.tokenizer, [c[0] for c in chunk], [c[1] for c in chunk])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        peft_model.eval()
        adapter_state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}
        info = {"examples": len(examples), "steps": len(losses),
                "first_loss": losses[0] if losses else None,
                "final_loss": float(sum(losses[-10:]) / len(losses[-10:])) if losses else None}
    merged = peft_model.merge_and_unload().eval()
    for p in merged.parameters():
        p.requires_grad_(False)
    return merged, adapter_state, info


# --------------------------------------------------------------------------- scoring and editor
class SeracScorer(TargetScorer):
    """Routes each query: in scope of a memorized edit -> the counterfactual model given that edit,
    else the unchanged base model. `TargetScore.routed` says which."""

    # Studies sample through one generation backend and would need two models (serac-icl
    # generates there); the editing measures generate through `continue_greedily`.
    can_generate = False

    def __init__(self, base: LMScorer, counterfactual: LMScorer, clf: ScopeClassifier,
                 memory: Sequence[EditRequest], threshold: float):
        import torch

        self.base, self.counterfactual, self.clf = base, counterfactual, clf
        self.memory = list(memory)
        self.threshold = threshold
        with torch.no_grad():
            self._mem = clf.embed([m.prompt for m in self.memory])
        self.calls = 0

    def route(self, prompts: Sequence[str]) -> list[EditRequest | None]:
        import torch

        with torch.no_grad():
            probs = torch.sigmoid(self.clf.logits(self._mem, self.clf.embed(list(prompts))))
        best = probs.max(-1)
        return [self.memory[int(j)] if float(p) > self.threshold else None
                for p, j in zip(best.values, best.indices)]

    def _groups(self, prompts: Sequence[str]):
        """Each prompt routed once: (model, routed, row indices, what that model reads) for the
        in-scope rows (the counterfactual model, given the edit) and the others (the base model)."""
        routes = self.route(prompts)
        inside = [i for i, r in enumerate(routes) if r is not None]
        outside = [i for i, r in enumerate(routes) if r is None]
        for model, routed, rows, texts in (
                (self.counterfactual, True, inside, [edit_context(routes[i], prompts[i]) for i in inside]),
                (self.base, False, outside, [prompts[i] for i in outside])):
            if rows:
                yield model, routed, rows, texts

    def score(self, prompts: Sequence[str], targets: Sequence[str]) -> list[TargetScore]:
        self.calls += 1
        out: list[TargetScore | None] = [None] * len(prompts)
        for model, routed, rows, texts in self._groups(prompts):
            for i, s in zip(rows, model.score(texts, [targets[i] for i in rows])):
                out[i] = dataclasses.replace(s, routed=routed)
        return out

    def continue_greedily(self, prompts: Sequence[str], max_new: Sequence[int], decided=None) -> list[str]:
        """Greedy continuations, each prompt routed as `score` routes it: in scope -> the
        counterfactual model continues "<edit> <target_new>\\n<prompt>", else the base model
        continues the prompt."""
        out: list[str] = [""] * len(prompts)
        for model, _, rows, texts in self._groups(prompts):
            at = (lambda k, t, rows=rows: decided(rows[k], t)) if decided else None
            for i, t in zip(rows, greedy_continuations(model, texts, [max_new[i] for i in rows], decided=at)):
                out[i] = t
        return out


def _save(cache, name: str, obj, info: dict) -> None:
    """One trained part and the training notes, each written whole (a crash leaves no half file)."""
    import torch

    write_whole(cache / name, lambda tmp: torch.save(obj, tmp))  # two processes may train the same parts
    write_json(cache / "training.json", info)


@EDITORS.register("serac")
class SeracEditor(MemoryEdits, EditorBase):
    can_generate = False  # studies would need two generation backends (serac-icl generates there)
    name = "serac"
    supports_batch = True
    supports_sequential = True
    uses_pool = True
    uses_held_out = True
    hparams_cls = SeracHParams

    def __init__(self, hparams=None, context=None):
        super().__init__(hparams, context)
        self._trained: tuple | None = None
        self._diagnostics: dict = {}
        self._memory: list[EditRequest] = []  # a sequence's edits so far

    def diagnostics(self) -> dict:
        return self._diagnostics

    def _cache_dir(self, lm: Any, held_out: Sequence[EditRequest]):
        hp = {k: v for k, v in self.hparams.to_dict().items() if k != "threshold"}
        raw = json.dumps({"model": model_key(lm.model), "held_out": sorted(e.uid for e in held_out),
                          "embedder": self.hparams.embedder or str(bundled_embedder_path()),
                          "hparams": hp}, sort_keys=True)
        return cache_dir() / "serac" / hashlib.sha256(raw.encode()).hexdigest()[:16]

    def _train(self, lm: Any, under_test: Sequence[EditRequest]):
        import torch


        test_uids = {r.uid for r in under_test}
        held_out = [e for e in self.context.held_out if e.uid not in test_uids]
        if len(held_out) < 2:
            raise SageInputError("SERAC trains on held-out edits (the other frameworks' entries); "
                                 "none were given: run it through `sage edit` or pass "
                                 "EditContext(held_out=...)")
        cache = self._cache_dir(lm, held_out)
        cache.mkdir(parents=True, exist_ok=True)
        clf = ScopeClassifier(self.hparams.embedder or str(bundled_embedder_path()))
        info = json.loads((cache / "training.json").read_text()) if (cache / "training.json").exists() else {}
        if (cache / "classifier.pt").exists():
            clf.load_state_dict(torch.load(cache / "classifier.pt"))
            log.info("SERAC: loaded the trained scope classifier from %s", cache)
        else:
            log.info("SERAC: training the scope classifier on %d held-out entries (once; cached at %s)",
                     len(held_out), cache)
            info["classifier"] = train_scope_classifier(clf, held_out, self.hparams)
            _save(cache, "classifier.pt", clf.state_dict(), info)
        if (cache / "counterfactual.pt").exists():
            model, _, _ = counterfactual_model(lm, self.hparams, None, torch.load(cache / "counterfactual.pt"))
            log.info("SERAC: loaded the counterfactual model's adapters from %s", cache)
        else:
            log.info("SERAC: training the counterfactual model on %d held-out entries", len(held_out))
            model, state, info["counterfactual"] = counterfactual_model(lm, self.hparams, held_out, None)
            _save(cache, "counterfactual.pt", state, info)
        info["held_out_entries"] = len(held_out)
        evaluated = [e for e in self.context.pool if e.uid not in {h.uid for h in held_out}]
        info["scope_accuracy_under_test"] = scope_accuracy(clf, evaluated or list(under_test),
                                                           self.hparams.threshold)
        log.info("SERAC scope accuracy on entries it was not trained on: %s", info["scope_accuracy_under_test"])
        self._diagnostics = info
        self._trained = (clf, LMScorer(model, lm.tokenizer))

    def apply(self, lm: Any, requests: Sequence[Any]) -> WrapperHandle:
        if self._trained is None:
            self._train(lm, requests)
        clf, counterfactual = self._trained
        scorer = SeracScorer(LMScorer(lm.model, lm.tokenizer), counterfactual, clf, requests,
                             self.hparams.threshold)
        return WrapperHandle(scorer, None, {"memory": len(requests)})

    # ------------------------------------------------------------------ sequential
    def start_sequence(self, lm: Any, sequence: Sequence[Any]) -> None:
        if self._trained is None:
            self._train(lm, sequence)
        self._memory = []

    def memory_scorer(self, lm: Any) -> SeracScorer:
        clf, counterfactual = self._trained
        return SeracScorer(LMScorer(lm.model, lm.tokenizer), counterfactual, clf, self._memory,
                           self.hparams.threshold)
