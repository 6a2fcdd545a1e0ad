"""A map function for the resubmission tests: slow enough that a signal lands mid-run."""

import time


def slow(sample):
    time.sleep(0.01)
    return sample
