"""Benchmarks: suites of prompts and the side-by-side harness behind ``structspec benchmark``."""
