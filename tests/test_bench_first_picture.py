"""``bench.first_picture`` times another checkout's server only where that checkout's code is what runs: in a folder
without it, this interpreter would import its installed ``server`` package and the comparison would be of one code
with itself."""

from __future__ import annotations

import pytest

from bench.first_picture import check_imports_from, summary
from testing.server import ROOT


def test_a_checkout_is_timed_only_where_its_own_server_package_is_imported(tmp_path):
    check_imports_from(ROOT)
    with pytest.raises(SystemExit, match="imports server from"):
        check_imports_from(tmp_path)


def test_runs_are_summed_up_as_median_and_range():
    runs = [{"healthy_s": h, "first_picture_s": f} for h, f in ((3.0, 9.0), (4.0, 8.0), (3.5, 12.0))]
    assert summary(runs) == {"healthy_s": {"median": 3.5, "min": 3.0, "max": 4.0},
                             "first_picture_s": {"median": 9.0, "min": 8.0, "max": 12.0}}  # fmt: skip
