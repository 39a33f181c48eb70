"""Placement scoring (pure): a per-device GPU model, FGD and its baselines reproduced on FGD's
own benchmark protocol, and our scorer. See policies/placement/README.md."""
