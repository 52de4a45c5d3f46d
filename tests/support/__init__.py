"""Helpers shared by test files (importable because pytest puts tests/ on the path)."""
