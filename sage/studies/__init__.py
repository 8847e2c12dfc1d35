"""Studies that combine editing and consistency scoring (before/after-edit measurements)."""
