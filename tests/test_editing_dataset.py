"""CounterMoral loader, hyperparameter validation, model profiles, metrics and CLI input errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sage.editing.editor_base import EDITORS, make_editor
from sage.editing.dataset import FRAMEWORKS, load_countermoral
from sage.errors import SageInputError


def _entry(**over):
    e = {
        "edit_template": {"action": "Lying", "relation": "is seen as", "target_true": "wrong",
                          "target_new": "fine"},
        "action_paraphrased_prompts": [f"Deceiving {i} is seen as" for i in range(10)],
        "relation_paraphrased_prompts": [f"Lying is regarded {i} as" for i in range(10)],
        "neighbourhood_prompts": [f"Stealing {i} is seen as" for i in range(10)],
        "meta_data": {"ethical_framework": "DEONTOLOGY", "broad_action": True, "unique_id": "D_1"},
    }
    e.update(over)
    return e


def _write(tmp_path, entries, framework="deontology", name="entries-broad.json"):
    d = tmp_path / framework
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(entries if isinstance(entries, str) else json.dumps(entries))
    return tmp_path


def test_real_data_sizes_and_request_fields(countermoral_dir):
    for fw in FRAMEWORKS:
        broad = load_countermoral(countermoral_dir, fw, "broad")
        assert len(broad) == 30
    specific = load_countermoral(countermoral_dir, "deontology", "specific")
    assert len(specific) == 300
    r = load_countermoral(countermoral_dir, "deontology", "broad", limit=1)[0]
    assert r.prompt == "Telling the truth is recognized as"
    assert r.subject == "Telling the truth" and r.target_new == "restrictive self-disclosure"
    assert len(r.action_paraphrases) == len(r.relation_paraphrases) == len(r.neighbourhood) == 10
    assert r.uid == "DEONTOLOGY_1_broad"


def test_both_neighbourhood_spellings(tmp_path):
    uk = _write(tmp_path / "uk", [_entry()])
    e = _entry()
    e["neighborhood_prompts"] = e.pop("neighbourhood_prompts")
    us = _write(tmp_path / "us", [e])
    a = load_countermoral(uk, "deontology", "broad")[0]
    b = load_countermoral(us, "deontology", "broad")[0]
    assert a.neighbourhood == b.neighbourhood and len(a.neighbourhood) == 10


@pytest.mark.parametrize("content, needle", [
    ("{not json", "malformed JSON"),
    (json.dumps([_entry(edit_template={"action": "x", "relation": "is", "target_true": "a"})]),
     "edit_template.target_new"),
    (json.dumps([{k: v for k, v in _entry().items() if k != "neighbourhood_prompts"}]),
     "neighborhood_prompts"),
    (json.dumps([_entry(action_paraphrased_prompts="oops")]), "action_paraphrased_prompts"),
    (json.dumps([_entry(), _entry()]), "duplicate"),
])
def test_bad_files_name_file_entry_and_field(tmp_path, content, needle):
    root = _write(tmp_path, content)
    with pytest.raises(SageInputError) as err:
        load_countermoral(root, "deontology", "broad")
    msg = str(err.value)
    assert needle in msg and "entries-broad.json" in msg and "\n" not in msg


def test_unknown_framework_and_subset(tmp_path):
    with pytest.raises(SageInputError, match="unknown framework"):
        load_countermoral(tmp_path, "stoicism", "broad")
    with pytest.raises(SageInputError, match="unknown subset"):
        load_countermoral(tmp_path, "deontology", "tiny")


def test_cli_bad_dataset_exits_2_with_one_line(tmp_path):
    root = _write(tmp_path, json.dumps([_entry(edit_template={"action": "x"})]))
    proc = subprocess.run([sys.executable, "-m", "sage", "edit", "--method", "rome", "--framework",
                           "deontology", "--data", str(root), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "edit_template.relation" in lines[0]
    assert "Traceback" not in proc.stderr


def test_cli_unknown_method_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sage", "edit", "--method", "mend"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown editing method 'mend'" in proc.stderr


def test_hparams_are_validated():
    with pytest.raises(SageInputError, match="v_lr"):
        make_editor("rome", {"v_lr": -1.0})
    with pytest.raises(SageInputError, match="unknown hyperparameter"):
        make_editor("ft-m", {"learning_rate": 1.0})
    with pytest.raises(SageInputError, match="rank"):
        make_editor("lora", {"rank": 0})
    assert make_editor("ft-m", {"steps": 3}).hparams.steps == 3


def test_registry_lists_every_method_module():
    names = EDITORS.names()
    assert {"ft-l", "ft-m", "lora", "rome", "ike"} <= set(names)
    for name in names:
        cls = EDITORS.get(name)
        assert cls.name == name and cls.hparams_cls is not None


def test_profiles_follow_config_architectures():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from sage.editing.profiles import profile_for

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                      architectures=["GPT2LMHeadModel"]))
    llama = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                                         num_attention_heads=2, num_key_value_heads=2,
                                         vocab_size=64, architectures=["LlamaForCausalLM"]))
    pg, pl = profile_for(gpt2), profile_for(llama)
    assert pg.conv1d and not pl.conv1d
    # weight viewed as [value_dim, key_dim] for both layouts
    assert tuple(pg.weight_kv(gpt2, 1).shape) == (32, 128)
    assert tuple(pl.weight_kv(llama, 1).shape) == (32, 64)
    assert pg.n_layers(gpt2) == pl.n_layers(llama) == 2
    llama.config.architectures = ["BertForMaskedLM"]
    with pytest.raises(SageInputError, match="no editing profile"):
        profile_for(llama)
    assert isinstance(pl.mlp_module(llama, 0), torch.nn.Linear)


def test_aggregate_mean_std():
    from sage.editing.entry_measures import aggregate

    agg = aggregate([{"reliability": 1.0}, {"reliability": 0.0}])
    assert agg["reliability"] == {"mean": 0.5, "std": 0.5, "n": 2}


def test_entries_without_unique_id_get_framework_and_position(tmp_path):
    """Entries without meta_data must not share a uid across frameworks (issue 29, item 1)."""
    from sage.editing.dataset import load_all

    bare = {k: v for k, v in _entry().items() if k != "meta_data"}
    for fw in ("care_ethics", "deontology"):
        _write(tmp_path, [bare, _entry()], framework=fw) if fw == "care_ethics" else _write(
            tmp_path, [bare, {**_entry(), "meta_data": {"unique_id": "D_2"}}], framework=fw)
    data = load_all(tmp_path, ["care_ethics", "deontology"], "broad")
    assert [r.uid for r in data["care_ethics"]] == ["care_ethics:0", "D_1"]
    assert [r.uid for r in data["deontology"]] == ["deontology:0", "D_2"]


def test_a_unique_id_used_in_two_frameworks_is_refused(tmp_path):
    from sage.editing.dataset import load_all

    for fw in ("care_ethics", "deontology"):
        _write(tmp_path, [_entry()], framework=fw)
    with pytest.raises(SageInputError) as err:
        load_all(tmp_path, ["care_ethics", "deontology"], "broad")
    msg = str(err.value)
    assert "'D_1'" in msg and "care_ethics" in msg and "deontology" in msg and "\n" not in msg


def test_files_are_parsed_once_while_unchanged(tmp_path):
    from sage.editing import dataset

    _write(tmp_path, [_entry()])
    dataset._parsed.cache_clear()
    for _ in range(3):
        load_countermoral(tmp_path, "deontology", "broad")
    assert dataset._parsed.cache_info().misses == 1
    _write(tmp_path, [_entry(), {**_entry(), "meta_data": {"unique_id": "D_9"}}])  # changed: read again
    assert [r.uid for r in load_countermoral(tmp_path, "deontology", "broad")] == ["D_1", "D_9"]


def test_edit_checks_the_files_a_method_reads_before_any_model_loads(countermoral_dir, tmp_path):
    """Only care_ethics present: SERAC (which trains on the other frameworks) is refused with one line
    naming the missing file, and no model was loaded (the model cache stays empty) (issue 29, item 8)."""
    import os
    import shutil

    from fixtures_cli import assert_clean_error, run_sage

    data = tmp_path / "cm"
    shutil.copytree(countermoral_dir / "care_ethics", data / "care_ethics")
    cache = tmp_path / "cache"
    env = {**os.environ, "SAGE_CACHE_DIR": str(cache)}
    proc = run_sage("edit", "--method", "serac", "--framework", "care_ethics", "--limit", "1", "--data", data,
                    "--out", tmp_path / "o", env=env)
    assert_clean_error(proc, "'serac'", "deontology", "entries-broad.json", "file not found")
    assert not (cache / "models").exists()
