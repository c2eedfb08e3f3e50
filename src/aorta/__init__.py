"""aorta: GPU hardware-queue evaluation with kernel-level (eBPF) visibility."""

from importlib.metadata import PackageNotFoundError, version


def _package_version() -> str:
    """The one version string: the installed package metadata (pyproject.toml)."""
    try:
        return version("aorta")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


__version__ = _package_version()
