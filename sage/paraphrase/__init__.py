"""Paraphrase stage: few-shot candidates filtered by a locally computed ParaScore."""
