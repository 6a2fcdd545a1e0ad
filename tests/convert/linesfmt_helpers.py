"""Functions named as ``module:function`` by the converter tests."""


def drop_odd(sample):
    return sample if sample["id"] % 2 == 0 else None
