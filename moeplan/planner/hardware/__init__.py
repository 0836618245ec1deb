"""The machine as the planner sees it: profiles, spec-sheet profiles, the parts catalog."""
