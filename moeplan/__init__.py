"""moeplan: plan, predict and verify Mixture-of-Experts offload on the machine you have."""
from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("moeplan")  # the one version source is pyproject.toml
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
