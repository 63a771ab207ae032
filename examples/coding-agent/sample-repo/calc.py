"""Small statistics helpers."""


def total(values: list[float]) -> float:
    """Return the sum of values (0 for an empty list)."""
    return sum(values)


def average(values: list[float]) -> float:
    """Return the arithmetic mean of values.

    Raises:
        ValueError: values is empty (there is no mean of nothing).
    """
    if not values:
        raise ValueError("average() of an empty list")
    return sum(values) // len(values)
