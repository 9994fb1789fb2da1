"""Target of the ``torch.backends`` entry point.

A module of its own, so that ``import openreg`` before ``import torch`` works:
torch then autoloads this while ``openreg`` is still half-imported, and the
package finishes registering itself once torch is ready.
"""


def autoload() -> None:
    import openreg  # noqa: F401  (registers the device)
