"""The run's edges.csv: one row per unordered pair of nodes of every question and text column.

Columns: model, question_id, kind (answer or rot), key_a, key_b (`p<paraphrase_id>.s<sample>`,
key_a the smaller, as `sage annotate export` orders pairs), pair_id (the id labels carry, so
`sage correlate` can judge every edge similarity against the pair labels themselves), text_a,
text_b, then one column per similarity with the symmetric edge similarity the graph used
(asymmetric ones symmetrised), and for the equivalence judges their directional values,
`<sim>_<value>_ab` (a first: NLI premise a, hypothesis b; judge Response A = a) and `_ba`, and
`<sim>_equivalent` (equivalence under the run's `--se-equivalence` rule, as semantic entropy
clusters).
"""
from __future__ import annotations

import pandas as pd

from sage.annotation.pairs import pair_id
from sage.data.responses import response_keys
from sage.metrics.semantic_entropy import equivalence_matrix


def edge_table(df: pd.DataFrame, keys, group_rows, on, sims: dict, relations: dict,
               equivalence: str = "loose") -> pd.DataFrame:
    row_keys = response_keys(df)
    names = list(dict.fromkeys(n for n, _ in sims))
    records = []
    for gi, (model, qid) in enumerate(keys):
        rows = group_rows[gi]
        for col in on:
            texts = df[col].iloc[rows].astype(str).tolist()
            mats = {n: sims[(n, col)][gi] for n in names}
            rels = {n: relations[(n, col)][gi] for n in names if (n, col) in relations}
            equivalent = {n: equivalence_matrix(rel.labels, equivalence) for n, rel in rels.items()}
            for i in range(len(rows)):
                for j in range(i + 1, len(rows)):
                    ka, kb = row_keys[rows[i]], row_keys[rows[j]]
                    a, b = (i, j) if ka <= kb else (j, i)
                    ka, kb = row_keys[rows[a]], row_keys[rows[b]]
                    rec = {"model": model, "question_id": qid, "kind": col, "key_a": ka, "key_b": kb,
                           "pair_id": pair_id(model, qid, col, ka, kb), "text_a": texts[a], "text_b": texts[b]}
                    for n, m in mats.items():  # None: a pair-file column that does not cover these texts
                        rec[n] = float("nan") if m is None else float((m[a, b] + m[b, a]) / 2)
                    for n, rel in rels.items():
                        for value, m in rel.values.items():
                            rec[f"{n}_{value}_ab"] = float(m[a, b])
                            rec[f"{n}_{value}_ba"] = float(m[b, a])
                        rec[f"{n}_equivalent"] = bool(equivalent[n][a, b])
                    records.append(rec)
    return pd.DataFrame(records)
