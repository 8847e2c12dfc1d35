"""Human-judgment loop: answer pairs for annotation, label import, agreement, metric-human correlation.

- `sage.annotation.pairs`: the pairs of each question with stable ids and content hashes.
- `sage.annotation.export`: CSV, JSONL and Label Studio tasks plus labeling configs.
- `sage.annotation.importer`: Label Studio exports, wide CSVs (one column per annotator), JSONL.
- `sage.annotation.matching`: which pair a label row belongs to (pair id, or question_id + two texts).
- `sage.annotation.agreement`: Fleiss' kappa, Krippendorff's alpha, bootstrap CIs.
- `sage.annotation.correlation`: per-question human consistency against metric columns.

Nothing heavy is imported here; submodules import pandas/scipy when used.
"""
