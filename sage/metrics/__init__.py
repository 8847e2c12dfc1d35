"""Metrics: SGE over semantic graphs, pairwise baselines (BLEU, ROUGE-L, BERTScore, cosine), statistics."""
