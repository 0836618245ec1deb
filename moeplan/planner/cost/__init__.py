"""Time of a placement as named terms, the factors it is scaled by, and their priors (pure)."""
