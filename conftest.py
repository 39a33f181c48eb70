"""Settings for every test folder (tests/ and e2e/).

Hypothesis: in CI (`.ci/run` sets CKPT_CI=1) property tests draw their examples from a fixed
seed, so a clean-clone run is reproducible and a failure can be rerun as it happened; anywhere
else they draw fresh examples on every run, which is how new counterexamples are found.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CKPT_CI") == "1":
    settings.load_profile("ci")
