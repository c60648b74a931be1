"""What nvmeio's Python benchmarks and examples share (the C++ side's support/machine.hpp and
stats.hpp): dropping the page cache before a cold run, and medians of per-round ratios."""

import os
import statistics


def drop_caches():
    """Writes back dirty pages and drops the page cache; False where that is refused (not
    root), so that the caller can refuse to call its reads cold."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def median_ratio(mine, reference):
    """Median over the rounds both hold of mine[round] / reference[round] (dicts by round), so
    that a ratio compares runs of the same round; None when they share none."""
    values = [mine[r] / reference[r] for r in mine if r in reference and reference[r] > 0]
    return statistics.median(values) if values else None
