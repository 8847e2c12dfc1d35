"""`record_logprobs`: answers carry their sequence log-probability for the likelihood-weighted
semantic entropy, equal to a teacher-forced pass of the model over the generated tokens."""
from __future__ import annotations

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_answers_record_sequence_logprob_equal_to_teacher_forcing(bundled_lm, tmp_path):
    import json

    import torch

    from sage.pipeline import PipelineConfig, generate_answers
    from sage.pipeline.stages import answer_messages

    para = pd.DataFrame({"question_id": ["q1", "q2"], "question": ["Is lying wrong?", "Should you help?"],
                         "paraphrase_id": [0, 0], "paraphrase": ["Is lying wrong?", "Should you help a stranger?"]})
    cfg = PipelineConfig.flat(model="smollm2-135m", answer_max_new_tokens=8, record_logprobs=True, device="cpu",
                         out_dir=str(tmp_path / "run"), cache_path=str(tmp_path / "c.sqlite"))
    df = generate_answers(para, cfg)
    assert {"answer_logprob", "answer_tokens"} <= set(df.columns)
    tok = bundled_lm.tokenizer
    store = next((tmp_path / "run" / "records").glob("answers-*.jsonl")).read_text().splitlines()
    raw = {json.loads(line)["question_id"]: json.loads(line)["answer_raw"] for line in store}
    checked = 0
    for row in df.itertuples():
        assert row.answer_logprob <= 0 and 1 <= row.answer_tokens <= 8
        prompt = tok.apply_chat_template([{"role": "user", "content": answer_messages(row.paraphrase)[0][1]}],
                                         tokenize=False, add_generation_prompt=True)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        g_ids = tok(raw[row.question_id], add_special_tokens=False)["input_ids"]
        if len(g_ids) != row.answer_tokens:  # the text did not re-tokenize to the same tokens
            continue
        ids = torch.tensor([p_ids + g_ids])
        with torch.inference_mode():
            logp = torch.log_softmax(bundled_lm.model(input_ids=ids).logits[0].double(), -1)
        forced = sum(logp[len(p_ids) - 1 + k, t].item() for k, t in enumerate(g_ids))
        assert row.answer_logprob == pytest.approx(forced, abs=1e-3)
        checked += 1
    assert checked >= 1
    # Without the flag nothing changes: same columns as before, no log-probs requested.
    plain = generate_answers(para, PipelineConfig.flat(model="smollm2-135m", answer_max_new_tokens=8, device="cpu",
                                                  out_dir=str(tmp_path / "run2"), cache_path=str(tmp_path / "c.sqlite")))
    assert "answer_logprob" not in plain.columns and plain["answer"].tolist() == df["answer"].tolist()
