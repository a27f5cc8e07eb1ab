# How many examples the Hypothesis tests of the suite draw.
#
# In CI the fuzz and property tests are bounded (a few seconds each); a longer
# campaign runs the same tests with more examples by setting
# PHOBOS_FUZZ_SCALE (tools/fuzz_campaign.py does), which multiplies every
# test's own count.
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def scale() -> int:
    """PHOBOS_FUZZ_SCALE, a positive integer (default 1)."""
    text = os.environ.get("PHOBOS_FUZZ_SCALE", "1").strip() or "1"
    value = int(text)
    if value < 1:
        raise ValueError(f"PHOBOS_FUZZ_SCALE={text} is not a positive integer")
    return value


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings for a test that draws `examples` examples in CI (times the scale)."""
    return settings(max_examples=examples * scale(), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])
