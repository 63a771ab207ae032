"""Tests for calc.py: run them with ``python3 -m unittest -q``."""

import unittest

from calc import average, total


class TotalTest(unittest.TestCase):
    def test_total(self) -> None:
        self.assertEqual(total([1, 2, 3]), 6)

    def test_total_of_empty_list(self) -> None:
        self.assertEqual(total([]), 0)


class AverageTest(unittest.TestCase):
    def test_average_of_whole_numbers(self) -> None:
        self.assertEqual(average([2, 4, 6]), 4)

    def test_average_with_a_fraction(self) -> None:
        self.assertEqual(average([1, 2]), 1.5)


if __name__ == "__main__":
    unittest.main()
