"""moeplan: plan, predict and verify Mixture-of-Experts offload on the machine you have."""

# the one version source: pyproject.toml reads it from here (tool.setuptools.dynamic)
__version__ = "0.1.0"
