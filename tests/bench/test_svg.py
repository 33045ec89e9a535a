"""Unit tests of svg.py's axes and steps; the charts themselves are tested through the pictures
table.py writes (test_table.py).

Run: python3 -m unittest discover -s tests/bench -p 'test_*.py'"""
import unittest

import svg


class Axis(unittest.TestCase):
    def test_ticks_hold_the_values_and_keep_marks_off_the_edges(self):
        self.assertEqual(svg.axis(0, 120.5), [0, 50, 100, 150])
        self.assertEqual(svg.axis(60.1, 64.5), [60, 61, 62, 63, 64, 65])
        self.assertEqual(svg.axis(60, 64.5, inside=[60]), [59, 60, 61, 62, 63, 64, 65])
        self.assertEqual(svg.axis(0, 100, inside=[100]), [0, 20, 40, 60, 80, 100, 120])
        self.assertEqual(svg.axis(0, 1), [0, 0.2, 0.4, 0.6, 0.8, 1])
        self.assertEqual(svg.axis(5, 5), [5, 6])

    def test_cdf_steps(self):
        self.assertEqual(svg.cdf_steps([3, 1, 2, 1]),
                         [(1, 0), (1, 0.25), (1, 0.25), (1, 0.5), (2, 0.5), (2, 0.75), (3, 0.75), (3, 1)])

    def test_interval_steps(self):
        self.assertEqual(svg.interval_steps([5, 0], 0.5), [(0, 5), (0.5, 5), (0.5, 0), (1.0, 0)])


if __name__ == "__main__":
    unittest.main()
