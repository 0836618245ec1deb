"""Rendering: rich tables for people (`*_table`), stable JSON for programs."""
