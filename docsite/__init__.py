"""The documentation site: reference pages generated from the code, the performance page
from ``bench/results/``, and the build (``python -m docsite.build``, ``make docs``)."""
