"""Validate a plan by running it, fit the cost model to the runs, re-plan."""
