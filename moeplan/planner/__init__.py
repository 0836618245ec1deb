"""The pure planner: dataclasses in, dataclasses out. No I/O, no clock, no env, no torch."""
