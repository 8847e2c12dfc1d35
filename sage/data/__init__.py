"""Data model: the responses table and its file formats."""
