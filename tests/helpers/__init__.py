"""Helpers shared by the tests: tokenizers and models small enough to reason about."""
