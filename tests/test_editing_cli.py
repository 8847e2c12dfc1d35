"""`sage edit` end to end on the bundled model: JSON lines as it goes, rerun skips finished entries,
summary with provenance, Markdown tables with the published GPT2-XL column, NAME:batch."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_edit_command_writes_lines_summary_tables_and_resumes(bundled_lm, countermoral_dir, tmp_path):
    from sage.cli.main import cli

    hp = tmp_path / "ft.json"
    hp.write_text(json.dumps({"ft-l": {"steps": 5, "lr": 2e-2, "norm_constraint": 2e-2}}))
    out = tmp_path / "out"
    args = ["edit", "--method", "ft-l", "--framework", "deontology", "--subset", "broad", "--limit", "2",
            "--data", str(countermoral_dir), "--out", str(out), "--hparams", str(hp)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    lines = (out / "ft-l" / "broad" / "entries.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert [r["uid"] for r in rows] == ["DEONTOLOGY_1_broad", "DEONTOLOGY_2_broad"]
    assert all(0 <= r["reliability"] <= 1 and "neighbourhood_score" in r for r in rows)
    import torch

    assert all(r["torch_threads"] == torch.get_num_threads() for r in rows)  # bit-level reruns need the same
    summary = json.loads((out / "ft-l" / "broad" / "summary.json").read_text())
    assert summary["hparams"]["steps"] == 5 and summary["seed"] == 0 and summary["git"]
    assert summary["versions"]["torch"] and summary["n_entries"] == 2
    rel = summary["frameworks"]["deontology"]["reliability"]
    assert rel["n"] == 2 and rel["mean"] == pytest.approx(sum(r["reliability"] for r in rows) / 2)
    tables = (out / "tables.md").read_text()
    assert "Table 2: broad actions" in tables and "(GPT2-XL)" in tables
    # the published GPT2-XL FT reliability for deontology/broad appears next to ours
    pub = json.loads((countermoral_dir / "published-results-gpt2-xl" / "ft.json").read_text())
    ref = pub["results"]["DEONTOLOGY"]["broad-actions"]["edited"]["AGS"]["reliability"]["mean"]
    assert f"{ref:.3f}" in tables

    again = CliRunner().invoke(cli, args)  # rerun: finished entries are skipped
    assert again.exit_code == 0, again.output
    assert (out / "ft-l" / "broad" / "entries.jsonl").read_text().splitlines() == lines

    # a second framework into the same directory: the summary covers both, not only the last call's
    other = CliRunner().invoke(cli, [a if a != "deontology" else "care_ethics" for a in args])
    assert other.exit_code == 0, other.output
    both = json.loads((out / "ft-l" / "broad" / "summary.json").read_text())
    assert list(both["frameworks"]) == ["care_ethics", "deontology"]
    assert (both["n_entries"], both["n_expected"]) == (4, 4)
    assert both["frameworks"]["deontology"]["reliability"] == summary["frameworks"]["deontology"]["reliability"]
    lines = (out / "ft-l" / "broad" / "entries.jsonl").read_text().splitlines()

    hp.write_text(json.dumps({"ft-l": {"steps": 6, "lr": 2e-2, "norm_constraint": 2e-2}}))
    changed = CliRunner().invoke(cli, args)  # other settings into the same directory: refused
    assert changed.exit_code == 2 and "hparams.steps 5 -> 6" in changed.output
    assert (out / "ft-l" / "broad" / "entries.jsonl").read_text().splitlines() == lines
    hp.write_text(json.dumps({"ft-l": {"steps": 5, "lr": 2e-2, "norm_constraint": 2e-2}}))

    batch = CliRunner().invoke(cli, [a if a != "ft-l" else "ft-l:batch" for a in args])
    assert batch.exit_code == 0, batch.output
    brows = [json.loads(x) for x in (out / "ft-l" / "broad-batch" / "entries.jsonl").read_text().splitlines()]
    assert len(brows) == 2 and all(r["batch_size"] == 2 for r in brows)
    assert "Table 4" in (out / "tables.md").read_text()


def test_batch_refused_for_single_edit_methods(bundled_lm, countermoral_dir, tmp_path):
    from sage.cli.main import cli

    res = CliRunner().invoke(cli, ["edit", "--method", "rome:batch", "--framework", "deontology",
                                   "--limit", "1", "--data", str(countermoral_dir),
                                   "--out", str(tmp_path)])
    assert res.exit_code == 2 and "does not batch" in res.output


def test_edit_command_keeps_the_editors_diagnostics_in_the_summary(bundled_lm, countermoral_dir, tmp_path):
    """`sage edit` runs through the sweep's workers; what their editors report (here the trained
    SERAC's scope accuracy on entries it was not trained on) must still reach summary.json."""
    from sage.cli.main import cli

    hp = tmp_path / "serac.json"
    hp.write_text(json.dumps({"serac": {"cls_epochs": 1, "cls_max_pairs": 300, "cf_steps": 10, "cf_layers": 2}}))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["edit", "--method", "serac", "--framework", "deontology", "--limit", "1",
                                   "--data", str(countermoral_dir), "--out", str(out), "--hparams", str(hp)])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "serac" / "broad" / "summary.json").read_text())
    info = summary["editor"]["deontology"]
    assert info["held_out_entries"] == 90  # the other three frameworks' broad entries
    assert info["classifier"]["pairs"] == 300 and info["counterfactual"]["steps"] == 10
    acc = info["scope_accuracy_under_test"]
    assert acc["n_entries"] == 30 and 0 <= acc["balanced_accuracy"] <= 1
    assert summary["seconds"]["entries_timed"] == 1


def test_entries_without_meta_data_keep_one_record_each_and_need_only_their_files(bundled_lm, countermoral_dir,
                                                                                  tmp_path):
    """Issue 29, items 1 and 8: entry 0 of two frameworks without meta_data gets two uids (two
    records, n_entries 2 of 2), and IKE runs on a folder holding only the frameworks asked for."""
    from sage.cli.main import cli

    data = tmp_path / "cm"
    for fw in ("care_ethics", "deontology"):
        entries = json.loads((countermoral_dir / fw / "entries-broad.json").read_text())[:3]
        del entries[0]["meta_data"]
        (data / fw).mkdir(parents=True)
        (data / fw / "entries-broad.json").write_text(json.dumps(entries))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["edit", "--method", "ike", "--framework", "care_ethics", "--framework",
                                   "deontology", "--limit", "1", "--data", str(data), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (out / "ike" / "broad" / "entries.jsonl").read_text().splitlines()]
    assert sorted(r["uid"] for r in rows) == ["care_ethics:0", "deontology:0"]
    summary = json.loads((out / "ike" / "broad" / "summary.json").read_text())
    assert (summary["n_entries"], summary["n_expected"]) == (2, 2)


def test_edit_sequential_writes_checkpoints_summary_and_a_sequential_table(bundled_lm, countermoral_dir, tmp_path):
    from sage.cli.main import cli

    hp = tmp_path / "grace.json"
    hp.write_text(json.dumps({"grace": {"steps": 10}}))
    out = tmp_path / "out"
    args = ["edit", "--sequential", "--method", "grace", "--framework", "deontology", "--subset", "broad",
            "--limit", "2", "--checkpoints", "1", "--drift-texts", "8", "--data", str(countermoral_dir),
            "--out", str(out), "--hparams", str(hp)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    run = out / "grace" / "broad-sequential-deontology"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["sequential"] and summary["n_edits"] == 2 and summary["git"] and summary["versions"]["torch"]
    assert [c["step"] for c in summary["checkpoints"]] == [1, 2]
    assert summary["checkpoints"][-1]["editor"] == {} or summary["checkpoints"][-1]["measures"]["reliability"]["n"] == 2
    assert summary["drift_baseline"]["perplexity"] > 1
    assert summary["checkpoints"][-1]["drift"]["fluency"] > 0  # GRACE generates through its adapter
    assert json.loads((run / "settings.json").read_text())["drift"]["texts"] == 8  # --drift-texts, recorded
    import torch

    edits = [json.loads(x) for x in (run / "edits.jsonl").read_text().splitlines()]
    points = [json.loads(x) for x in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert {r["torch_threads"] for r in edits + points[1:]} == {torch.get_num_threads()}
    tables = (out / "tables.md").read_text()
    assert "## Sequential editing" in tables and "| grace (first 2 per framework) | broad (deontology) | 2 |" in tables
    edits = (run / "edits.jsonl").read_text()
    again = CliRunner().invoke(cli, args)  # finished: summarised again, nothing remade
    assert again.exit_code == 0, again.output
    assert (run / "edits.jsonl").read_text() == edits
