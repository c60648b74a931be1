"""What nvmeio's Python benchmarks and examples share (the C++ side's support/machine.hpp and
stats.hpp): dropping the page cache before a cold run, medians of per-round ratios, and the
command-line values their options take."""

import argparse
import os
import statistics

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


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


def size_arg(text):
    """A size in bytes for argparse: a positive number of bytes, or of K, M or G (binary, a
    fraction allowed: 2.25G). Anything else is a usage error naming the value."""
    number, unit = (text[:-1], _UNITS[text[-1].upper()]) if text[-1:].upper() in _UNITS \
        else (text, 1)
    try:
        size = int(float(number) * unit)
    except (ValueError, OverflowError):  # not a number, nan, inf
        size = 0
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or a number with K, M "
                                         "or G; more than 0)")
    return size


def count_arg(text):
    """A count for argparse (rounds, blocks, layers): a whole number of at least 1."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (a whole number, at least 1)")
    return count
