"""Thin typer commands: parse arguments, call one function, render. One module per area."""
