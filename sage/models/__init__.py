"""Model resolution and loading shared by every stage (embedders, generators, editors)."""
